//go:build !unix

package kwok

import "os"

// lockFile does nothing where flock is missing: concurrent builds race.
func lockFile(*os.File) error { return nil }
