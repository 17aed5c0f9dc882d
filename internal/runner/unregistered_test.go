package runner

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testwait"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/shell"
)

// runUntilReturn starts the runner loop like startRunner but hands back
// Run's error; ctx is never cancelled by the test, so only Run itself can
// end it.
func (w *world) runUntilReturn(t *testing.T) (<-chan error, *testWriter) {
	t.Helper()
	st, err := LoadState(w.state)
	if err != nil {
		t.Fatal(err)
	}
	log, rec := recordingLogger(t)
	r, err := New(Config{
		State: st, StatePath: w.state, WorkDir: w.work, Logger: log, ApprovalPoll: 200 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond, ClaimWait: 5 * time.Second, Grace: 2 * time.Second, ShipWait: 10 * time.Second,
		Executor: shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true, Logger: log}, Dir: filepath.Join(w.work, "shell")}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return done, rec
}

func (w *world) removeRunner() {
	w.t.Helper()
	if err := w.srv.Client(w.token).Procedure(context.Background(), api.MethodRemoveRunner,
		api.RunnerRef{Repo: w.repo, Name: "r1"}, nil); err != nil {
		w.t.Fatalf("remove runner: %v", err)
	}
}

// TestRunner_RemovedWhileLongPollingStopsWithErrNotRegistered pins the
// runner that retried a refused claim every 30 s forever after an owner
// removed it: now Run logs what to do and returns an error.
func TestRunner_RemovedWhileLongPollingStopsWithErrNotRegistered(t *testing.T) {
	w := newWorld(t, true)
	done, rec := w.runUntilReturn(t)
	testwait.For(t, 10*time.Second, "the runner to start polling", func() bool { return rec.contains("runner started") })
	w.removeRunner()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegistered) {
			t.Fatalf("Run returned %v, want ErrNotRegistered", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on after the runner was removed")
	}
	for _, want := range []string{
		"this runner is not registered on " + w.srv.URL + " (removed?)",
		"knotless-run login --force --server " + w.srv.URL + " --repo alice/app --name r1 --state " + w.state,
	} {
		if !rec.contains(want) {
			t.Errorf("runner log lacks %q", want)
		}
	}
}

// TestRunner_RemovedDuringARunCancelsItAndStops: the run in progress ends
// at once (its heartbeats and result are refused anyway) and Run returns.
func TestRunner_RemovedDuringARunCancelsItAndStops(t *testing.T) {
	w := newWorld(t, true)
	done, rec := w.runUntilReturn(t)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + "steps:\n  - run: echo started; sleep 120\n"})
	testwait.For(t, 30*time.Second, "step output", func() bool { return strings.Contains(string(w.stepLog(run.ID, 1)), "started") })
	start := time.Now()
	w.removeRunner()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegistered) {
			t.Fatalf("Run returned %v, want ErrNotRegistered", err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("Run went on after the runner was removed")
	}
	t.Logf("stopped %s after the removal", time.Since(start).Round(time.Millisecond))
	if !rec.contains("cancelling running runs: the server refuses this runner") {
		t.Error("runner log does not say it cancelled the run")
	}
	if !rec.contains(`reason=runner-stopped`) {
		t.Error("the run did not end runner-stopped")
	}
}
