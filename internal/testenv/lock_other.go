//go:build !unix

package testenv

import "os"

// lockFile does nothing where there is no flock: concurrent Installs may
// then build twice, each into its own directory, and rename in turn.
func lockFile(*os.File) error { return nil }
