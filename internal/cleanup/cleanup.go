// Package cleanup removes what runs leave on the runner's disk: workspaces
// and executor session directories. It must never leave a run's files
// behind because a step made them read-only.
package cleanup

import (
	"os"
	"path/filepath"
)

// RemoveAll removes dir like os.RemoveAll, also when steps left read-only
// directories in it (Go's module cache does): when a first attempt fails,
// it makes every directory below dir writable (0700) and tries again. A
// missing dir is not an error.
func RemoveAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
