package docker_test

import (
	"fmt"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"
)

var containerRemoveForce = container.RemoveOptions{Force: true}

func mountTmpfs(dir string, size int64) error {
	return unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
}

func unmount(dir string) error { return unix.Unmount(dir, unix.MNT_DETACH) }

func statfsFree(dir string) (uint64, string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, dir, err
	}
	return st.Bavail * uint64(st.Bsize), dir, nil
}

var containerLogsAll = container.LogsOptions{ShowStdout: true, ShowStderr: true}
