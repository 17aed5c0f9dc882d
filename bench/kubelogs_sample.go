package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// logsComponents are the local cluster's processes a log stream may cost,
// by the start of their /proc/PID/comm (which the kernel cuts at 15
// bytes): the control plane, the node, and every pod's containerd shim.
var logsComponents = []struct{ name, comm string }{
	{"kube-apiserver", "kube-apiserver"},
	{"kubelet", "kubelet"},
	{"containerd", "containerd"},
	{"containerd shims", "containerd-shim"},
	{"etcd", "etcd"},
	{"step agents (and their exec bridges)", "knotless-agent"},
	{"writers", "kubelogswriter"},
}

// sampler reads the CPU time and RSS of the cluster's processes (by
// comm) and of explicit ones (by name) every 250 ms over a window, and of
// the pods (the kubepods cgroup) and the whole machine (/proc/stat).
type sampler struct {
	explicit map[string]int // name → pid
	cpu0     map[int]time.Duration
	cpu1     map[int]time.Duration
	comp     map[int]string // pid → component
	peak     map[string]int64
	busy0    int64 // /proc/stat ticks not idle
	busy1    int64
	pods0    int64 // kubepods cgroup usage_usec
	pods1    int64
	wall     time.Duration
	t0       time.Time
	cpuWin   map[int]time.Duration // cpu1 at the window's end
	cpuTail  map[int]time.Duration // cpu1 when tail was called
	busyTail int64
}

func newSampler(explicit map[string]int) *sampler {
	return &sampler{explicit: explicit, cpu0: map[int]time.Duration{}, cpu1: map[int]time.Duration{},
		comp: map[int]string{}, peak: map[string]int64{}}
}

// scan finds the components' processes.
func (s *sampler) scan() {
	for name, pid := range s.explicit {
		s.comp[pid] = name
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ok := s.comp[pid]; ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		comm := strings.TrimSpace(string(b))
		for _, c := range logsComponents {
			if comm == c.comm || (c.comm == "containerd-shim" && strings.HasPrefix(comm, c.comm)) {
				s.comp[pid] = c.name
			}
		}
	}
}

// sample reads each process's CPU time and the components' RSS.
func (s *sampler) sample() {
	rss := map[string]int64{}
	for pid, name := range s.comp {
		c, err := procCPU(pid)
		if err != nil {
			continue
		}
		if _, ok := s.cpu0[pid]; !ok {
			s.cpu0[pid] = c
		}
		s.cpu1[pid] = c
		if st, err := procStatus(pid); err == nil {
			rss[name] += st["VmRSS"]
		}
	}
	for name, v := range rss {
		s.peak[name] = max(s.peak[name], v)
	}
}

// window waits until start and samples until start + secs.
func (s *sampler) window(ctx context.Context, start time.Time, secs float64) error {
	s.scan()
	select {
	case <-time.After(time.Until(start)):
	case <-ctx.Done():
		return ctx.Err()
	}
	s.t0 = time.Now()
	s.busy0, s.pods0 = machineBusy(), podsUsage()
	s.sample()
	end := start.Add(time.Duration(secs * float64(time.Second)))
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for i := 1; time.Now().Before(end); i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if i%8 == 0 {
			s.scan()
		}
		s.sample()
	}
	s.busy1, s.pods1 = machineBusy(), podsUsage()
	s.wall = time.Since(s.t0)
	s.cpuWin = maps.Clone(s.cpu1)
	return nil
}

// tail samples once more when the path has delivered every byte (after
// window): costs then also says the CPU time from the start to here per
// megabyte. A process that ended before counts up to its last sample.
func (s *sampler) tail() {
	s.sample()
	s.cpuTail = maps.Clone(s.cpu1)
	s.busyTail = machineBusy()
}

// costs returns each component's cores and peak RSS over the window (the
// pods' cgroup as "pods (cgroup kubepods)"), with, after tail, its CPU
// milliseconds per megabyte of mb delivered; and the machine's busy cores
// over the window.
func (s *sampler) costs(mb float64) ([]ProcCost, float64) {
	by := map[string]*ProcCost{}
	for pid, name := range s.comp {
		c1, ok := s.cpuWin[pid]
		if !ok {
			continue
		}
		pc := by[name]
		if pc == nil {
			pc = &ProcCost{Name: name}
			by[name] = pc
		}
		pc.Procs++
		pc.Cores += (c1 - s.cpu0[pid]).Seconds() / s.wall.Seconds()
		if ct, ok := s.cpuTail[pid]; ok && mb > 0 {
			pc.MsPerMB += (ct - s.cpu0[pid]).Seconds() * 1e3 / mb
		}
	}
	var out []ProcCost
	for name, pc := range by {
		pc.PeakRSS = s.peak[name]
		out = append(out, *pc)
	}
	if s.pods1 > 0 {
		out = append(out, ProcCost{Name: "pods (cgroup kubepods)", Cores: float64(s.pods1-s.pods0) / 1e6 / s.wall.Seconds()})
	}
	slices.SortFunc(out, func(a, b ProcCost) int { return strings.Compare(a.Name, b.Name) })
	busy := float64(s.busy1-s.busy0) / clockTicks / s.wall.Seconds()
	if s.cpuTail != nil && mb > 0 {
		out = append(out, ProcCost{Name: "machine (all processes)", MsPerMB: float64(s.busyTail-s.busy0) / clockTicks * 1e3 / mb})
	}
	return out, busy
}

// machineBusy is the CPU time the machine spent not idle, in clock ticks
// (/proc/stat's cpu line less idle and iowait).
func machineBusy() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var total int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
			continue
		}
		total += n
	}
	return total
}

// podsUsage is the kubepods cgroup's CPU usage in µs (the kubelet's
// cgroupfs driver: cgroup v1's cpuacct hierarchy, or v2), 0 when there is
// none.
func podsUsage() int64 {
	for _, p := range []string{"/sys/fs/cgroup/cpuacct/kubepods/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/kubepods/cpuacct.usage"} {
		if b, err := os.ReadFile(p); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n / 1000
		}
	}
	for _, p := range []string{"/sys/fs/cgroup/kubepods/cpu.stat", "/sys/fs/cgroup/kubepods.slice/cpu.stat"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}
