package kwok

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExited_NamesTheProcessThatEndedWithItsLogWhileTheOthersRun pins
// what ends the benchmark's waits at once: a kwok that exited at start
// (a flag its binary rejected) left the wait for Ready nodes polling for
// its full 10 minutes, and the error said only "0 of 10" nodes. Exited
// must stay nil while every process runs (the control) and, once one
// ends, name it with its log's last lines.
func TestExited_NamesTheProcessThatEndedWithItsLogWhileTheOthersRun(t *testing.T) {
	c := &ControlPlane{Dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.start2("long", "/bin/sh", "-c", "exec sleep 60"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := c.Exited(); err != nil {
		t.Fatalf("Exited with every process running = %v, want nil", err)
	}
	if err := c.start2("short", "/bin/sh", "-c", "echo 'Execute exit: trying to get bool value'; exit 1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Exited() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	err := c.Exited()
	if err == nil {
		t.Fatal("Exited = nil 10 s after a process exited")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "short exited") || !strings.Contains(msg, "trying to get bool value") {
		t.Errorf("Exited = %q, want it to name short and quote its log", msg)
	}
}
