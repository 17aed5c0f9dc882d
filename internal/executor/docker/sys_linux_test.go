package docker_test

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func mountTmpfs(dir string, size int64) error {
	return unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
}

func unmount(dir string) error { return unix.Unmount(dir, unix.MNT_DETACH) }
