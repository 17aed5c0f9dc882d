//go:build !linux

package agent

import (
	"errors"
	"os"
	"time"
)

// setTimes is not done through a descriptor here: errors.ErrUnsupported
// (the caller sets the times by path).
func setTimes(f *os.File, mtime time.Time) error { return errors.ErrUnsupported }
