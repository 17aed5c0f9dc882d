package executortest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/testwait"
)

// Env tells the suite what it can observe of one session's environment.
// Zero fields switch off the checks that need them (the test says so with
// t.Skip); they never make a check pass.
type Env struct {
	// Procs lists the processes the suite can see: every process that could
	// show a step's argv (for the shell executor, every process of the host),
	// with PIDs as a step's shell sees them ($$, $!). HostProcs does this
	// for executors whose steps share the host's PID namespace.
	Procs func() ([]Proc, error)

	// NewGate makes a gate a step can wait at until the test opens it. It is
	// called at most once per scenario. FifoGate does this for executors
	// whose steps see a host directory.
	NewGate func(t *testing.T) Gate
}

// Proc is one process as Env.Procs sees it.
type Proc struct {
	PID   int
	PGID  int
	State byte   // as in /proc/PID/stat: 'R', 'S', 'D', 'Z' (zombie), ...
	Argv  []byte // /proc/PID/cmdline: arguments separated by NUL bytes
}

// Dead reports whether the process has exited (a zombie waiting to be
// reaped is dead: it runs nothing and holds nothing but its PID).
func (p Proc) Dead() bool { return p.State == 'Z' || p.State == 'X' || p.State == 'x' }

// Gate holds a step until the test opens it.
type Gate struct {
	// Wait is a shell command that blocks until Open is called.
	Wait string
	// Open releases every step waiting at the gate (and later ones). It
	// fails the test when it cannot; calling it again does nothing.
	Open func(t *testing.T)
}

// HostProcs lists every process of this host from /proc. Processes that
// exit while it reads are left out.
func HostProcs() ([]Proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var procs []Proc
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if p, ok := HostProc(pid); ok {
			procs = append(procs, p)
		}
	}
	if len(procs) == 0 {
		return nil, errors.New("list processes: /proc shows none")
	}
	return procs, nil
}

// HostProc reads process pid of this host from /proc; ok is false when
// there is no such process (or it ended while being read).
func HostProc(pid int) (p Proc, ok bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Proc{}, false
	}
	_, state, pgid, ok := parseStat(stat)
	if !ok {
		return Proc{}, false
	}
	argv, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Proc{}, false
	}
	return Proc{PID: pid, PGID: pgid, State: state, Argv: argv}, true
}

// FifoGate returns a gate made of a named pipe in dir (a directory both the
// test and the step see under the same path, e.g. the shell executor's
// workspace): the step blocks reading it; Open connects a writer and closes
// it, so the reader sees end of file. No sleeps on either side.
func FifoGate(dir string) func(t *testing.T) Gate {
	return func(t *testing.T) Gate {
		t.Helper()
		path := filepath.Join(dir, fmt.Sprintf(".gate-%d-%s", os.Getpid(), randHex(t, 6)))
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatalf("make gate: %v", err)
		}
		t.Cleanup(func() { _ = os.Remove(path) })
		opened := false
		return Gate{
			Wait: "cat " + shellQuote(path) + " >/dev/null",
			Open: func(t *testing.T) {
				t.Helper()
				if opened {
					return
				}
				// O_NONBLOCK: fails with ENXIO until the step has the
				// pipe open for reading, so the test never blocks.
				var f *os.File
				testwait.For(t, 30*time.Second, "the step to open the gate", func() bool {
					var err error
					f, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
					if err != nil && !errors.Is(err, syscall.ENXIO) {
						t.Fatalf("open gate: %v", err)
					}
					return err == nil
				})
				opened = true
				if err := f.Close(); err != nil {
					t.Fatalf("open gate: %v", err)
				}
			},
		}
	}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
