//go:build !linux

package builder

import (
	"errors"
	"runtime"
)

// Run refuses on systems other than Linux: the builder needs Linux's user
// and mount namespaces (the Linux Run says what it does). It returns exit
// status 1 and an error naming the system.
func Run(c Config) (int, error) {
	return 1, errors.New("knotless-builder runs on Linux only (user and mount namespaces), not on " + runtime.GOOS)
}
