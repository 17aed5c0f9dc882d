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

// floodWorkflow's step 1 prints 10 MB (100,000 lines); step 2 one line.
const floodWorkflow = wfHead + `
steps:
  - name: flood
    run: yes 'knotless log line 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0' | head -n 100000
  - name: after
    run: echo after the flood
`

// lossMarkers are the lines a step's log holds where bytes went missing:
// the runner's (LostMarker: it could not write them to its spool) and the
// agent's note (it could not store them in its output file).
var lossMarkers = []string{"[knotless: ", "bytes of this log were lost here", "the agent could not store all of the step's output"}

// checkFloodLoss checks what a lost part of floodWorkflow's step 1 must
// leave, whichever writer lost it: the run errored/executor saying so,
// step 1 errored/executor, a marker on a line of its own in step 1's log
// (not in the middle of a line of the step's), a line in the setup log.
func checkFloodLoss(t *testing.T, w *world, run api.Run) {
	t.Helper()
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
	said := strings.Contains(final.Message, "bytes of its log were lost") || strings.Contains(final.Message, "part of its output was lost")
	if final.State != api.StateErrored || final.Reason != api.ReasonExecutor || !said {
		t.Errorf("run %s/%s %q, want errored/executor saying log bytes were lost", final.State, final.Reason, final.Message)
	}
	at := -1
	for _, m := range lossMarkers[1:] {
		if i := strings.Index(log1, m); i >= 0 {
			at = strings.LastIndex(log1[:i], lossMarkers[0])
			break
		}
	}
	switch {
	case at < 0:
		t.Errorf("step 1's log (%d bytes) has no marker of the lost bytes; tail:\n%s", len(log1), log1[max(0, len(log1)-300):])
	case at > 0 && log1[at-1] != '\n':
		t.Errorf("step 1's log has the marker of the lost bytes in the middle of a line:\n%s", log1[max(0, at-100):min(len(log1), at+200)])
	}
	if !strings.Contains(setup, "step 1 (flood): ") || !(strings.Contains(setup, "bytes of its log were lost") || strings.Contains(setup, "part of its output was lost")) {
		t.Errorf("the setup log does not say step 1 lost log bytes:\n%s", setup)
	}
	st := steps(w.getRun(run.ID))
	if st[1].State != api.StepErrored || st[1].Reason != api.ReasonExecutor {
		t.Errorf("step 1 %s/%s, want errored/executor", st[1].State, st[1].Reason)
	}
}

// A step printing 10 MB into a runner whose work directory is a 4 MiB file
// system: the disk fills faster than the shipper delivers. The bytes the
// runner (or the agent, whose output file is on the same disk: which one
// meets the full disk first is a race) could not write are not lost
// silently: the step's log has a marker where they went missing, the
// setup log says so, and the run ends errored/executor instead of
// succeeded (it used to succeed with 38% of the log, the next step's
// output gone, and only the runner's own log saying "lost bytes").
func TestIntegration_FullDiskLogLossIsMarkedAndErrorsTheRun(t *testing.T) {
	w := newWorld(t, true)
	mountSmallWorkDir(t, w.work, "4m")
	w.startRunner(nil)
	checkFloodLoss(t, w, w.push(map[string]string{".knotless/workflows/ci.yml": floodWorkflow}))
}

// TestIntegration_AgentLosingOutputIsMarkedOnALineOfItsOwn pins the other
// side of that race, which CI met: the agent's output file, not the
// runner's spool, hit the full disk; the run said so, but the log's note
// began in the middle of a line of the step's ("...0123456789abcd[knotless:
// the agent could not store ..."). Only the shell executor's directory
// (the agent's output files) is small here, so the agent always loses.
func TestIntegration_AgentLosingOutputIsMarkedOnALineOfItsOwn(t *testing.T) {
	w := newWorld(t, true)
	mountSmallWorkDir(t, filepath.Join(w.work, "shell"), "1m")
	w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": floodWorkflow})
	checkFloodLoss(t, w, run)
	if log1 := string(w.stepLog(run.ID, 1)); !strings.Contains(log1, "\n[knotless: the agent could not store all of the step's output") {
		t.Errorf("step 1's log has no note of the agent's loss on a line of its own; tail:\n%s", log1[max(0, len(log1)-300):])
	}
}
