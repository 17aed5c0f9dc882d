package docker

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// pidsEventFiles are where the engine's cgroup of container id counts
// refused forks ("max N" in pids.events), for the cgroup drivers and
// versions dockerd uses: cgroupfs v1 and v2, systemd v1 and v2. The
// runner reads them on its own host, which is the engine's (the checkout
// is a bind mount of the runner's disk).
func pidsEventFiles(id string) []string {
	return []string{
		filepath.Join("/sys/fs/cgroup/pids/docker", id, "pids.events"),
		filepath.Join("/sys/fs/cgroup/docker", id, "pids.events"),
		filepath.Join("/sys/fs/cgroup/pids/system.slice", "docker-"+id+".scope", "pids.events"),
		filepath.Join("/sys/fs/cgroup/system.slice", "docker-"+id+".scope", "pids.events"),
	}
}

// pidsRefused returns how many forks the container's pids cgroup has
// refused so far; 0 when it cannot be read.
func (e *Executor) pidsRefused(id string) int64 {
	for _, f := range pidsEventFiles(id) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if v, ok := bytes.CutPrefix(line, []byte("max ")); ok {
				n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
				return n
			}
		}
	}
	return 0
}
