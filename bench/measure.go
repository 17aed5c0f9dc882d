package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Summary describes a set of durations, in milliseconds.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"medianMs"`
	P90    float64 `json:"p90Ms"`
	Min    float64 `json:"minMs"`
	Max    float64 `json:"maxMs"`
}

// summarize returns the median, 90th percentile (nearest rank), minimum and
// maximum of ds; the zero Summary when ds is empty.
func summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(ms)
	return Summary{
		N:      len(ms),
		Median: median(ms),
		P90:    ms[(len(ms)*9+9)/10-1],
		Min:    ms[0],
		Max:    ms[len(ms)-1],
	}
}

// median of sorted values: the middle one, or the mean of the two middle ones.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// procCPU returns the CPU time (user + system, all threads) process pid has
// used, from /proc/PID/stat, with a resolution of 10 ms.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields after it follow ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("read CPU time of process %d: short /proc stat line", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("read CPU time of process %d: bad utime/stime", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// procStatus returns the fields of /proc/PID/status that are sizes in kB
// (VmRSS, VmHWM, ...) in bytes, and Threads as a count.
func procStatus(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("read memory of process %d: %w", pid, err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(val)
		if len(fs) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fs) == 2 && fs[1] == "kB" {
			n *= 1024
		}
		out[name] = n
	}
	return out, sc.Err()
}

// Machine describes where the figures were taken.
type Machine struct {
	Date      string `json:"date"`
	CPUs      int    `json:"cpus"` // what nproc prints
	CPUModel  string `json:"cpuModel"`
	MemoryMiB int64  `json:"memoryMiB"`
	Kernel    string `json:"kernel"`
	OS        string `json:"os"`
	Go        string `json:"go"`
	Git       string `json:"git"`
	Commit    string `json:"commit"` // of the benchmarked source tree
	// Load is /proc/loadavg's 1, 5 and 15 minute averages when the
	// benchmarks started: other work on the machine skews the figures.
	Load string `json:"load"`
}

func machine() Machine {
	m := Machine{
		Date: time.Now().UTC().Format("2006-01-02 15:04 MST"),
		CPUs: runtime.NumCPU(),
		Go:   runtime.Version(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				m.MemoryMiB = kb / 1024
			}
		}
	}
	if out, err := exec.Command("git", "--version").Output(); err == nil {
		m.Git = strings.TrimPrefix(strings.TrimSpace(string(out)), "git version ")
	}
	if out, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	return m
}
