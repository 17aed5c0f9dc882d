package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testenv"
)

// mountSmallWorkDir puts a size-byte tmpfs at dir, or skips the test.
func mountSmallWorkDir(t *testing.T, dir string, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "skipped: needs root to mount a small tmpfs as the runner's work directory (run as root to check a full disk is never a silent loss)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		testenv.Skipf(t, "skipped: cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", dir, err)
		}
	})
}

// A step printing 10 MB into a runner whose work directory is a 4 MiB file
// system: the disk fills faster than the shipper delivers. The bytes the
// runner could not write are not lost silently: the step's log has a
// marker where they went missing, the setup log says so, and the run ends
// errored/executor instead of succeeded (it used to succeed with 38% of
// the log, the next step's output gone, and only the runner's own log
// saying "lost bytes").
func TestIntegration_FullDiskLogLossIsMarkedAndErrorsTheRun(t *testing.T) {
	w := newWorld(t, true)
	mountSmallWorkDir(t, w.work, "4m")
	w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
steps:
  - name: flood
    run: yes 'knotless log line 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0' | head -n 100000
  - name: after
    run: echo after the flood
`})
	final := w.waitFinal(run.ID, 120*time.Second)
	log1 := string(w.stepLog(run.ID, 1))
	setup := string(w.stepLog(run.ID, 0))
	lines := strings.Count(log1, "knotless log line")
	t.Logf("run %d %s/%s %q; step 1 has %d of 100000 lines, %d bytes", run.ID, final.State, final.Reason, final.Message, lines, len(log1))
	if lines == 100000 {
		testenv.Skipf(t, "skipped: the 4 MiB work directory never filled (the shipper kept up); nothing was lost to check")
	}
	if final.State == api.StateSucceeded {
		t.Errorf("run succeeded although %d of 100000 lines of step 1 are missing", 100000-lines)
	}
	if final.State != api.StateErrored || final.Reason != api.ReasonExecutor || !strings.Contains(final.Message, "bytes of its log were lost") {
		t.Errorf("run %s/%s %q, want errored/executor saying log bytes were lost", final.State, final.Reason, final.Message)
	}
	if !strings.Contains(log1, "bytes of this log were lost here") {
		t.Errorf("step 1's log (%d bytes) has no marker of the lost bytes; tail:\n%s", len(log1), log1[max(0, len(log1)-300):])
	}
	if !strings.Contains(setup, "bytes of its log were lost") {
		t.Errorf("the setup log does not say step 1 lost log bytes:\n%s", setup)
	}
	st := steps(w.getRun(run.ID))
	if st[1].State != api.StepErrored || st[1].Reason != api.ReasonExecutor {
		t.Errorf("step 1 %s/%s, want errored/executor", st[1].State, st[1].Reason)
	}
	if _, err := os.Stat(filepath.Join(w.work, "runs")); err != nil {
		t.Logf("runs dir: %v", err)
	}
}
