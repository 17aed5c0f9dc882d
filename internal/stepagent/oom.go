package stepagent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// oomCounters are the files that count the kernel's OOM kills in the
// memory cgroup the agent runs in, as a container sees them: cgroup v2's
// memory.events and cgroup v1's memory.oom_control, both with a line
// "oom_kill N" (Linux 4.13 and later).
var oomCounters = []string{
	"/sys/fs/cgroup/memory.events",
	"/sys/fs/cgroup/memory/memory.oom_control",
}

// oomKills returns the number of processes the kernel's OOM killer has
// killed in the step's own cgroup v2 directory cgDir (when not "") and,
// when the agent is a container's PID 1, in the container's memory cgroup
// (their sum), and whether any counter could be read. On a host the files
// under /sys/fs/cgroup count the whole machine, so they are read only
// inside a container, where they are the container's: a step killed for
// exceeding the pod's memory limit raises them.
func oomKills(cgDir string) (uint64, bool) {
	var files []string
	if cgDir != "" {
		files = append(files, filepath.Join(cgDir, "memory.events"))
	}
	if os.Getpid() == 1 {
		files = append(files, oomCounters...)
	}
	var n uint64
	ok := false
	for _, f := range files {
		if v, err := readOOMKill(f); err == nil {
			n += v
			ok = true
		}
	}
	return n, ok
}

func readOOMKill(file string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("oom_kill ")); ok {
			return strconv.ParseUint(string(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no oom_kill line", file)
}

// preferOOMVictim makes pid the OOM killer's first choice (oom_score_adj
// 1000; its children inherit it), so that a step over the memory limit is
// killed rather than the agent that reports it. Raising the value needs no
// privilege; best effort.
func preferOOMVictim(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
}
