package server_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// getRun reads a run with its steps as alice.
func getRun(t *testing.T, f *fixture, id int64) api.Run {
	t.Helper()
	var run api.Run
	if err := f.alice().Query(context.Background(), api.MethodGetRun, url.Values{"run": {itoa(id)}}, &run); err != nil {
		t.Fatal(err)
	}
	return run
}

// stepsOf returns a run's steps as index → "state/reason".
func stepsOf(run api.Run) map[int]string {
	out := map[int]string{}
	for _, st := range run.Steps {
		out[st.Index] = st.State + "/" + st.Reason
	}
	return out
}

func TestLease_RunnerLostLeavesNoStepRunningOrPending(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	zero := 0
	for _, u := range []api.UpdateStepInput{
		{Run: id, Step: 0, Name: "setup", State: api.StepRunning},
		{Run: id, Step: 0, State: api.StepSucceeded, ExitCode: &zero},
		{Run: id, Step: 1, Name: "build", State: api.StepRunning},
		{Run: id, Step: 2, Name: "test", State: api.StepPending},
	} {
		procedure(t, r, api.MethodUpdateStep, u, nil)
	}
	// The runner goes silent: the sweeper ends the run, and its steps.
	f.WaitRun(t, id, 10*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	run := getRun(t, f, id)
	got := stepsOf(run)
	want := map[int]string{0: "succeeded/", 1: "errored/runner-lost", 2: "skipped/"}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("after runner-lost, step %d = %s, want %s (run %s/%s)", i, got[i], w, run.State, run.Reason)
		}
	}

	// The runner comes back and delivers what really happened to step 1:
	// recorded. Its stale "running" for step 2 is ignored.
	three := 3
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, State: api.StepFailed,
		ExitCode: &three, Reason: api.ReasonExitCode}, nil)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 2, State: api.StepRunning}, nil)
	run = getRun(t, f, id)
	got = stepsOf(run)
	if got[1] != "failed/exit-code" || run.Steps[1].ExitCode == nil || *run.Steps[1].ExitCode != 3 {
		t.Errorf("late final update of step 1: %s exit %v; want failed/exit-code exit 3 (the runner's report)", got[1], run.Steps[1].ExitCode)
	}
	if got[2] != "skipped/" {
		t.Errorf("late running update of step 2 after the run ended: step is %s, want still skipped", got[2])
	}
	if run.State != api.StateErrored || run.Reason != api.ReasonRunnerLost {
		t.Errorf("run = %s/%s after late step updates, want still errored/runner-lost", run.State, run.Reason)
	}
}

func TestComplete_StepsTheRunnerDidNotReportEndWithTheRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, Name: "build", State: api.StepRunning}, nil)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 2, Name: "test", State: api.StepPending}, nil)
	if err := f.alice().Procedure(context.Background(), api.MethodCancelRun, api.RunRef{Run: id}, nil); err != nil {
		t.Fatal(err)
	}
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: id, State: api.StateCancelled, Reason: api.ReasonCancelled}, nil)
	got := stepsOf(getRun(t, f, id))
	if got[1] != "cancelled/cancelled" || got[2] != "skipped/" {
		t.Fatalf("steps after a cancelled run = %v; want 1 cancelled/cancelled, 2 skipped", got)
	}
}
