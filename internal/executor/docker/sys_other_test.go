//go:build !linux

package docker_test

import "errors"

// mountTmpfs and unmount are Linux's (sys_linux_test.go); the docker
// executor's tests that need them run on Linux.
func mountTmpfs(dir string, size int64) error { return errors.ErrUnsupported }

func unmount(dir string) error { return errors.ErrUnsupported }
