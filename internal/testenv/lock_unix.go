//go:build unix

package testenv

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock of f, held until f is closed.
func lockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }
