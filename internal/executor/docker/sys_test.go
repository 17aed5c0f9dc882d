package docker_test

import (
	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"
)

func statfsFree(dir string) (uint64, string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, dir, err
	}
	return st.Bavail * uint64(st.Bsize), dir, nil
}

var (
	containerLogsAll     = container.LogsOptions{ShowStdout: true, ShowStderr: true}
	containerRemoveForce = container.RemoveOptions{Force: true}
)
