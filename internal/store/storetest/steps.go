package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// stepStates returns a run's steps as index → "state/reason".
func stepStates(t *testing.T, db store.Store, id int64) map[int]string {
	t.Helper()
	steps, err := db.Steps(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, s := range steps {
		out[s.Index] = s.State + "/" + s.Reason
	}
	return out
}

// startSteps claims run id for runner 1 and reports step 1 succeeded, step 2
// running and step 3 pending.
func startSteps(t *testing.T, db store.Store, id int64, leaseUntil time.Time) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	if _, err := db.ClaimRun(ctx, id, store.Claim{RunnerID: 1, RunnerName: "r1", TokenHash: fmt.Sprint("t", id), Now: now, LeaseUntil: leaseUntil}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	for _, s := range []store.Step{
		{Index: 1, Name: "build", State: api.StepRunning},
		{Index: 1, State: api.StepSucceeded, ExitCode: &zero},
		{Index: 2, Name: "test", State: api.StepRunning},
		{Index: 3, Name: "deploy", State: api.StepPending},
	} {
		if _, err := db.UpdateStep(ctx, id, s); err != nil {
			t.Fatal(err)
		}
	}
}

func testExpireLeases_StepsLeftRunningOrPendingAreEnded(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	_, runs := seed(t, db, 2)
	past := time.Now().Add(-time.Minute)
	startSteps(t, db, runs[0].ID, past)
	startSteps(t, db, runs[1].ID, past)
	if _, err := db.CancelRun(ctx, runs[1].ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExpireLeases(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	got := stepStates(t, db, runs[0].ID)
	want := map[int]string{1: "succeeded/", 2: "errored/runner-lost", 3: "skipped/"}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("runner-lost run, step %d = %s, want %s", i, got[i], w)
		}
	}
	got = stepStates(t, db, runs[1].ID)
	want = map[int]string{1: "succeeded/", 2: "cancelled/cancelled", 3: "skipped/"}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("cancelled run whose runner vanished, step %d = %s, want %s", i, got[i], w)
		}
	}
}

func testCompleteRun_StepsTheRunnerNeverEndedAreEnded(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	_, runs := seed(t, db, 1)
	id := runs[0].ID
	startSteps(t, db, id, time.Now().Add(time.Minute))
	if _, err := db.CompleteRun(ctx, id, store.RunFinal{State: api.StateErrored, Reason: api.ReasonExecutor}); err != nil {
		t.Fatal(err)
	}
	got := stepStates(t, db, id)
	if got[2] != "errored/executor" || got[3] != "skipped/" {
		t.Fatalf("steps after the run errored = %v; want 2 errored/executor, 3 skipped", got)
	}
}

func testCancelRun_QueuedRunsStepsEnd(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	_, runs := seed(t, db, 1)
	id := runs[0].ID
	if err := db.EnsureStep(ctx, id, 0, "setup", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CancelRun(ctx, id, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := stepStates(t, db, id); got[0] != "skipped/" {
		t.Fatalf("pending step of a run cancelled while queued = %s, want skipped", got[0])
	}
}

func testUpdateStep_AfterRunEndsFinalIsRecordedNonFinalIgnored(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	_, runs := seed(t, db, 1)
	id := runs[0].ID
	startSteps(t, db, id, time.Now().Add(-time.Minute))
	if _, err := db.ExpireLeases(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The runner's late report of step 2's real result is the truth.
	seven := 7
	r, err := db.UpdateStep(ctx, id, store.Step{Index: 2, State: api.StepFailed, ExitCode: &seven, Reason: api.ReasonExitCode})
	if err != nil || r.State != api.StateErrored {
		t.Fatalf("late final step update: run %s, err %v; want accepted, run still errored", r.State, err)
	}
	// A late "running" changes nothing, neither for a step settled by the
	// run's end nor for one never seen.
	for _, s := range []store.Step{{Index: 3, State: api.StepRunning}, {Index: 4, Name: "extra", State: api.StepRunning}} {
		if _, err := db.UpdateStep(ctx, id, s); err != nil {
			t.Fatalf("late non-final update of step %d: %v; want ignored without error", s.Index, err)
		}
	}
	got := stepStates(t, db, id)
	if got[2] != "failed/exit-code" || got[3] != "skipped/" || got[4] != "" {
		t.Fatalf("steps = %v; want 2 failed/exit-code (the runner's report), 3 still skipped, no step 4", got)
	}
	steps, _ := db.Steps(ctx, id)
	if steps[1].ExitCode == nil || *steps[1].ExitCode != 7 {
		t.Errorf("step 2 exit code = %v, want 7", steps[1].ExitCode)
	}
	// A log that first shows up after the run ended makes an ended step.
	if err := db.EnsureStep(ctx, id, 5, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := stepStates(t, db, id); got[5] != "errored/runner-lost" {
		t.Errorf("step first heard of after the run ended = %s, want errored/runner-lost", got[5])
	}
}
