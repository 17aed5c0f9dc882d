package stepagent

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// prSetChildSubreaper is prctl(2)'s PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// reaper reaps every child of the agent (as a subreaper it inherits
// orphans) and hands the wait status of the children it was asked about to
// their waiters.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
	sigs    chan os.Signal
}

func newReaper() *reaper {
	r := &reaper{waiters: map[int]chan syscall.WaitStatus{}, sigs: make(chan os.Signal, 1)}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	return r
}

// forkExec starts a process and registers a waiter for it atomically with
// respect to the reaping loop, so its status cannot be missed.
func (r *reaper) forkExec(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiters[pid] = ch
	return pid, ch, nil
}

func (r *reaper) loop() {
	tick := time.NewTicker(time.Second) // a SIGCHLD coalesced away is caught within a second
	defer tick.Stop()
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
			r.mu.Lock()
			if ch, ok := r.waiters[pid]; ok {
				delete(r.waiters, pid)
				ch <- ws
			}
			r.mu.Unlock()
		}
		select {
		case <-r.sigs:
		case <-tick.C:
		}
	}
}

// exitCode is a shell's exit status, 128+N when signal N killed it.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// procInfo is what /proc/PID/stat says of a process.
type procInfo struct {
	pid, ppid, pgid int
	state           byte
}

func (p procInfo) dead() bool { return p.state == 'Z' || p.state == 'X' || p.state == 'x' }

// readProcs lists every process visible in /proc.
func readProcs() []procInfo {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procInfo, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp ..."; comm may hold spaces and ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || len(f[0]) != 1 {
			continue
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		pgid, _ := strconv.Atoi(string(f[2]))
		out = append(out, procInfo{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0]})
	}
	return out
}

// spared names the processes of detached steps that another step's end
// leaves alone: their process groups, and the processes in their cgroups
// (which also finds a service that left its process group, a daemon that
// called setsid).
type spared struct {
	pgids map[int]bool
	pids  map[int]bool
}

func (s *spared) has(p procInfo) bool {
	return s != nil && (s.pgids[p.pgid] || s.pids[p.pid])
}

// descendants returns the live (not zombie) descendants of root, leaving
// out every process spare names, with the processes below it.
func descendants(root int, spare *spared) []int {
	procs := readProcs()
	children := map[int][]procInfo{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if c.pid == root || spare.has(c) {
				continue
			}
			queue = append(queue, c.pid)
			if !c.dead() {
				out = append(out, c.pid)
			}
		}
	}
	return out
}

// signalTree sends sig to every live descendant of root and reports how
// many it signalled.
func signalTree(root int, sig syscall.Signal, spare *spared) int {
	n := 0
	for _, pid := range descendants(root, spare) {
		if syscall.Kill(pid, sig) == nil {
			n++
		}
	}
	return n
}

// killTree SIGKILLs every descendant of root, again and again while new
// ones appear (a process forking while it is killed), until none is left
// alive or bound passes. It reports whether none is left.
func killTree(root int, bound time.Duration, spare *spared) bool {
	if root == os.Getpid() && noChildren() {
		return true // the common end of a step: nothing to scan /proc for
	}
	deadline := time.Now().Add(bound)
	delay := time.Millisecond
	for {
		if signalTree(root, syscall.SIGKILL, spare) == 0 && len(descendants(root, spare)) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// noChildren reports whether this process has no child at all, zombies
// included, from /proc/self/task/*/children: then it has no descendant
// either (as a subreaper it inherits every orphan of its tree, and a
// process's orphans are handed over before it stops being a child). False
// when it cannot tell (a kernel without those files).
func noChildren() bool {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil || len(bytes.TrimSpace(b)) > 0 {
			return false
		}
	}
	return true
}

// ProcStartTime reads field 22 (starttime, clock ticks since boot) of
// /proc/PID/stat: with the PID it tells a process apart from a later one
// that reuses the PID.
func ProcStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(string(f[19]), 10, 64)
}

// KillDescendants SIGKILLs every live descendant of pid (one pass) and
// reports how many it signalled: for cleaning up after an agent that no
// longer answers.
func KillDescendants(pid int) int { return signalTree(pid, syscall.SIGKILL, nil) }

// killGroup SIGKILLs process group pgid (a detached step's) again and
// again until no live process is left in it or bound passes; it reports
// whether none is left.
func killGroup(pgid int, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	delay := time.Millisecond
	for {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		live := false
		for _, p := range readProcs() {
			if p.pgid == pgid && !p.dead() {
				live = true
				break
			}
		}
		if !live {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}
