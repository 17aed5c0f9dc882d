package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testwait"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/shell"
)

// sessionClient starts a runner session of st's identity, as another
// knotless-run process would, and returns a client that sends it.
func sessionClient(t *testing.T, st *State) *api.RunnerClient {
	t.Helper()
	c := api.NewRunnerClient(st.Client(nil))
	if _, err := c.StartSession(context.Background(), api.StartSessionInput{Executor: "test"}); err != nil {
		t.Fatalf("start session: %v", err)
	}
	return c
}

func (w *testWriter) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.buf.String(), s)
}

// runnerIn starts a second runner process of the world's identity (the
// same state file) in its own work directory and hands back Run's error.
func (w *world) runnerIn(t *testing.T, work string, heartbeat time.Duration) (<-chan error, *testWriter, context.CancelFunc) {
	t.Helper()
	st, err := LoadState(w.state)
	if err != nil {
		t.Fatal(err)
	}
	log, rec := recordingLogger(t)
	r, err := New(Config{
		State: st, StatePath: w.state, WorkDir: work, Logger: log, ApprovalPoll: 200 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond, ClaimWait: 5 * time.Second, Grace: 2 * time.Second, ShipWait: 10 * time.Second,
		Heartbeat: heartbeat, Executor: shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true, Logger: log}, Dir: filepath.Join(work, "shell")}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, returned := make(chan error, 1), make(chan struct{})
	go func() { done <- r.Run(ctx); close(returned) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(60 * time.Second):
			t.Error("runner did not stop")
		}
	})
	return done, rec, cancel
}

// TestRunner_SupersededByAnotherProcessStopsWithoutReportingItsRuns: a
// second knotless-run with the same state file starts; the first learns it
// from its next heartbeat, stops claiming, stops its run without a word to
// the server (its spool stays) and Run returns ErrSuperseded. The second,
// which knows nothing of the run, ends it errored/runner-lost.
func TestRunner_SupersededByAnotherProcessStopsWithoutReportingItsRuns(t *testing.T) {
	w := newWorld(t, true)
	first, rec, _ := w.runnerIn(t, w.work, 200*time.Millisecond)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + "steps:\n  - run: echo started; sleep 120\n"})
	testwait.For(t, 30*time.Second, "step output", func() bool { return strings.Contains(string(w.stepLog(run.ID, 1)), "started") })

	second, rec2, stopSecond := w.runnerIn(t, filepath.Join(t.TempDir(), "work2"), 0)
	select {
	case err := <-first:
		if !errors.Is(err, ErrSuperseded) {
			t.Fatalf("first Run returned %v, want ErrSuperseded", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first runner went on after a second process took its identity")
	}
	if !rec.contains("another knotless-run process started with this runner's identity (the same state file, " + w.state) {
		t.Error("the first runner does not say another process took over")
	}
	final := w.waitFinal(run.ID, 30*time.Second)
	if final.State != api.StateErrored || final.Reason != api.ReasonRunnerLost || final.Message != lostRunMessage {
		t.Fatalf("run = %s/%s %q; want errored/runner-lost %q from the second process, nothing from the first",
			final.State, final.Reason, final.Message, lostRunMessage)
	}
	if _, err := os.Stat(filepath.Join(w.work, "spool", strconv.FormatInt(run.ID, 10))); err != nil {
		t.Errorf("the first runner's spool of the run is gone (%v): it must stay, undelivered", err)
	}
	if !rec2.contains("the server says this runner holds a run this work directory knows nothing of") {
		t.Error("the second runner does not say it ended a run it knew nothing of")
	}
	stopSecond()
	if err := <-second; err != nil {
		t.Errorf("second runner: %v", err)
	}
}

// TestRunner_HeldRunWithoutASpoolWhoseStepsNeverStartedIsSetUpAgain: a
// run claimed by a process that is gone before it recorded the claim (it
// worked elsewhere, or was stopped between its claim and its first
// record: the docs guides' runner restarts once met this under load) is
// set up again from the server's record and runs, where it used to end
// errored/runner-lost although nothing of it had run.
func TestRunner_HeldRunWithoutASpoolWhoseStepsNeverStartedIsSetUpAgain(t *testing.T) {
	w := newWorld(t, true)
	// A process working elsewhere claimed it and is gone.
	other := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + "steps:\n  - run: echo x\n"})
	st, err := LoadState(w.state)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := sessionClient(t, st).Claim(context.Background(), 0)
	if err != nil || claimed == nil || claimed.Run.ID != other.ID {
		t.Fatalf("claim: %v %+v, want run %d", err, claimed, other.ID)
	}
	w.startRunner(nil)
	final := w.waitFinal(other.ID, 30*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("run = %s/%s %q, want succeeded: no step had run, so it is set up again", final.State, final.Reason, final.Message)
	}
	w.assertCleanedUp(other.ID)
}

func TestRunner_RemovedBeforeStartStopsWithErrNotRegistered(t *testing.T) {
	w := newWorld(t, true)
	w.removeRunner()
	done, rec := w.runUntilReturn(t)
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegistered) {
			t.Fatalf("Run returned %v, want ErrNotRegistered", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on although the server does not know the runner")
	}
	if !rec.contains("this runner is not registered on " + w.srv.URL) {
		t.Error("runner log does not say what to do")
	}
}

func TestRunner_ServerDownAtStartIsWaitedForAndLoggedOnce(t *testing.T) {
	w := newWorld(t, true)
	w.srv.Stop()
	log, rec := recordingLogger(t)
	w.startRunner(func(c *Config) { c.Logger = log; c.MaxBackoff = 100 * time.Millisecond })
	const outage = "cannot start a runner session: the server does not answer"
	testwait.For(t, 10*time.Second, "the runner to notice the outage", func() bool { return rec.contains(outage) })
	w.srv.Restart()
	testwait.For(t, 20*time.Second, "the session", func() bool { return rec.contains("runner session started") })
	if n := rec.count(outage); n != 1 {
		t.Errorf("the outage was logged %d times, want once", n)
	}
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + "steps:\n  - run: echo after\n"})
	if final := w.waitFinal(run.ID, 30*time.Second); final.State != api.StateSucceeded {
		t.Fatalf("run = %+v", final)
	}
}
