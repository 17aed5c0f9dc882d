//go:build !linux

package cleanup

import (
	"errors"
	"log/slog"
	"runtime"
)

// RemoveAll refuses on systems other than Linux: removing without
// following links or crossing mounts needs Linux's statx mount IDs and
// umount (the Linux RemoveAll says what it does), and os.RemoveAll would
// not keep those promises. Runners run on Linux.
func RemoveAll(dir string, log *slog.Logger) error {
	return errors.New("cleanup: removing " + dir + " needs Linux, not " + runtime.GOOS)
}
