//go:build !linux

package logship

import (
	"errors"
	"os"
)

// punchHole is unsupported outside Linux (see the Linux punchHole).
func punchHole(f *os.File, off, n int64) error { return errors.ErrUnsupported }

// preallocate is unsupported outside Linux: the caller writes the bytes.
func preallocate(f *os.File, n int64) error { return errors.ErrUnsupported }
