package cluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ProcessStatus is one process of the running cluster.
type ProcessStatus struct {
	Name   string
	PID    int   // 0 when not running
	PSSKiB int64 // proportional set size from /proc/PID/smaps_rollup, KiB
}

// Processes lists the cluster's own processes (by pid file), then one entry
// each for all containerd shims of our containerd and all processes in pods
// (kubepods cgroups), with their summed PSS.
func (c Config) Processes() []ProcessStatus {
	var out []ProcessStatus
	for _, p := range c.processes() {
		pid := c.running(p)
		out = append(out, ProcessStatus{Name: p.name, PID: pid, PSSKiB: pss(pid)})
	}
	shims := ProcessStatus{Name: "containerd shims"}
	for _, pid := range c.shimPIDs() {
		shims.PSSKiB += pss(pid)
		shims.PID++ // a count here
	}
	pods := ProcessStatus{Name: "pod processes"}
	for _, pid := range podPIDs() {
		pods.PSSKiB += pss(pid)
		pods.PID++
	}
	return append(out, shims, pods)
}

// WriteStatus prints Processes as a table with a total.
func (c Config) WriteStatus(w io.Writer) {
	var total int64
	fmt.Fprintf(w, "%-24s %8s %10s\n", "PROCESS", "PID", "PSS MiB")
	for _, p := range c.Processes() {
		total += p.PSSKiB
		pid := strconv.Itoa(p.PID)
		if strings.HasSuffix(p.Name, "shims") || strings.HasSuffix(p.Name, "processes") {
			pid = fmt.Sprintf("%d procs", p.PID)
		}
		fmt.Fprintf(w, "%-24s %8s %10.1f\n", p.Name, pid, float64(p.PSSKiB)/1024)
	}
	fmt.Fprintf(w, "%-24s %8s %10.1f\n", "total", "", float64(total)/1024)
}

// pss reads Pss from /proc/PID/smaps_rollup in KiB; 0 if unreadable.
func pss(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) >= 2 && f[0] == "Pss:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// shimPIDs are the containerd-shim processes whose command line names our
// containerd socket.
func (c Config) shimPIDs() []int {
	sock := c.containerdSocket()
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == sock {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// kubepodsRoots are the kubelet's pod cgroups with the cgroupfs driver: one
// per cgroup v1 hierarchy, or one on a v2 host.
func kubepodsRoots() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	v2, _ := filepath.Glob("/sys/fs/cgroup/kubepods*")
	return append(roots, v2...)
}

// podPIDs are the processes in kubepods cgroups (any v1 hierarchy or v2),
// each once.
func podPIDs() []int {
	seen := map[int]bool{}
	for _, root := range kubepodsRoots() {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}
