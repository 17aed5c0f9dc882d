//go:build !linux

package stepagent

import (
	"errors"
	"syscall"
)

// becomeSubreaper is Linux's (PR_SET_CHILD_SUBREAPER); the step agent
// runs on Linux only.
func becomeSubreaper() error { return errors.ErrUnsupported }

// inCgroup does nothing outside Linux, which has no cgroups.
func inCgroup(sys *syscall.SysProcAttr, fd int) {}
