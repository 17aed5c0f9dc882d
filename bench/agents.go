package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Step agents (knotless-agent) are detached from the runner that starts
// them on purpose: they outlive it, and a runner stopped with SIGTERM hands
// its runs over and leaves them running. Stopping the runner processes
// therefore does not stop the agents; stopAgents finds them by the state
// directory on their command line.

// stopAgents stops every knotless-agent process whose --dir lies under dir
// and every process below it: SIGTERM first (the agent kills its step's
// processes and exits), SIGKILL to whatever is left after bound. It
// returns how many agents it found.
func stopAgents(dir string, bound time.Duration) int {
	agents := agentsUnder(dir)
	if len(agents) == 0 {
		return 0
	}
	// The tree is read before the agents die: their orphans are reparented
	// away from them afterwards.
	var tree []int
	for _, pid := range agents {
		tree = append(tree, descendants(pid)...)
	}
	for _, pid := range agents {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) && anyAlive(agents) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, pid := range append(agents, tree...) {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return len(agents)
}

// agentsUnder lists the knotless-agent processes whose --dir argument is
// inside dir.
func agentsUnder(dir string) []int {
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	var out []int
	eachProcess(func(pid int) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			return
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if len(args) < 2 || filepath.Base(args[0]) != "knotless-agent" {
			return
		}
		for i, a := range args[:len(args)-1] {
			if a == "--dir" && strings.HasPrefix(filepath.Clean(args[i+1])+string(filepath.Separator), prefix) {
				out = append(out, pid)
				return
			}
		}
	})
	return out
}

// descendants lists every process below pid (children, their children...).
func descendants(pid int) []int {
	children := map[int][]int{}
	eachProcess(func(p int) {
		if pp, ok := parentOf(p); ok {
			children[pp] = append(children[pp], p)
		}
	})
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func eachProcess(f func(pid int)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 1 {
			f(pid)
		}
	}
}

// parentOf reads field 4 (ppid) of /proc/PID/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func anyAlive(pids []int) bool {
	for _, p := range pids {
		if alive(p) {
			return true
		}
	}
	return false
}
