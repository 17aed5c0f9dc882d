package shell

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestShell_SweepKillsWhatACrashedRunnerLeftRunning pins the case of a runner
// killed with SIGKILL mid-step: its step's shell dies (Pdeathsig) but a
// background process of the step lives on. The next runner's Sweep must
// find the recorded process group and kill it.
func TestShell_SweepKillsWhatACrashedRunnerLeftRunning(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "run-7")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	// The "step": a shell that leaves a background process and waits.
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & echo $! > "+ready+"; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL); _ = cmd.Wait() })
	if err := recordGroup(dir, pgid); err != nil {
		t.Fatal(err)
	}
	poll(t, func() bool { b, _ := os.ReadFile(ready); return len(b) > 0 })
	// The runner dies: the kernel kills the shell, the background process stays.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !groupAlive(pgid) {
		t.Fatal("test setup: the background process should still be alive")
	}

	e := New(Config{Dir: base})
	if err := e.Sweep(context.Background(), nil); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	poll(t, func() bool { return !groupAlive(pgid) })
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("session directory still there after Sweep: %v", err)
	}
}

// TestShell_SweepSparesAProcessThatReusedThePID pins that a record whose PID
// now belongs to another process (a different start time) is not acted on.
func TestShell_SweepSparesAProcessThatReusedThePID(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "run-8")
	_ = os.MkdirAll(dir, 0o700)
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	// A record with the right PID but another start time.
	if err := os.WriteFile(filepath.Join(dir, pgroupFile), []byte(itoa(pid)+" 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := New(Config{Dir: base}).Sweep(context.Background(), nil); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if !groupAlive(pid) {
		t.Fatal("Sweep killed a process that only reused the recorded PID")
	}
}

func itoa(n int) string { return fmt.Sprint(n) }

func poll(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
