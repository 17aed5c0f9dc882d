package executortest

import (
	"bytes"
	"strconv"
)

// ProcsScript is a POSIX shell script that lists the processes of the
// environment it runs in (a container, a pod), for ParseProcs: for each
// process, its /proc/PID/stat line, then its /proc/PID/cmdline on a line
// of its own with NUL written as \001 and newline as \002. An executor's
// Env.Procs runs it in the environment as the test (not as a step) and
// parses what it prints; HostProcs reads the host's /proc directly.
const ProcsScript = `for d in /proc/[0-9]*; do s=$(cat $d/stat 2>/dev/null) || continue; printf '%s\n' "$s"; tr '\000\n' '\001\002' < $d/cmdline 2>/dev/null; printf '\n'; done`

// ParseProcs reads the output of ProcsScript into Procs, PIDs as the
// environment sees them. A process whose stat line does not parse (one
// that ended while the script read it) is left out.
func ParseProcs(out []byte) []Proc {
	var procs []Proc
	lines := bytes.Split(out, []byte{'\n'})
	for i := 0; i+1 < len(lines); i += 2 {
		pid, state, pgid, ok := parseStat(lines[i])
		if !ok {
			continue
		}
		argv := bytes.ReplaceAll(lines[i+1], []byte{1}, []byte{0})
		argv = bytes.ReplaceAll(argv, []byte{2}, []byte{'\n'})
		procs = append(procs, Proc{PID: pid, PGID: pgid, State: state, Argv: argv})
	}
	return procs
}

// parseStat reads the PID, state and process group of a /proc/PID/stat
// line, "pid (comm) state ppid pgrp ..." (proc_pid_stat(5)), whose comm
// may hold spaces and ')'.
func parseStat(stat []byte) (pid int, state byte, pgid int, ok bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	head := bytes.Fields(stat[:i])
	f := bytes.Fields(stat[i+1:])
	if len(head) == 0 || len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, 0, false
	}
	pid, err := strconv.Atoi(string(head[0]))
	if err != nil {
		return 0, 0, 0, false
	}
	pgid, err = strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, 0, false
	}
	return pid, f[0][0], pgid, true
}
