package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// groupRun creates one queued run of group g in repo (a pipeline of its own).
func groupRun(t *testing.T, db store.Store, repo store.Repo, g string, cancel bool) store.Run {
	t.Helper()
	_, runs, err := db.CreatePipeline(context.Background(), store.NewPipeline{RepoID: repo.ID, Ref: "refs/heads/main", SHA: "abc", Event: "push",
		Runs: []store.NewRun{{Workflow: "ci", WorkflowPath: ".knotless/workflows/ci.yml", Source: "src", State: api.StateQueued,
			ConcurrencyGroup: g, CancelInProgress: cancel}}})
	if err != nil {
		t.Fatal(err)
	}
	return runs[0]
}

// A run of a group is neither listed as claimable nor claimed while an
// older run of its group has not ended; another group, or none, is free.
func testClaimRun_WaitsForTheOlderRunOfItsConcurrencyGroup(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	first := groupRun(t, db, repo, "ci-main", false)
	second := groupRun(t, db, repo, "ci-main", false)
	other := groupRun(t, db, repo, "ci-dev", false)
	claim := func(id int64) error {
		_, err := db.ClaimRun(ctx, id, store.Claim{RunnerID: 1, RunnerName: "r1", TokenHash: "t" + time.Now().String(), Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
		return err
	}
	queued, err := db.QueuedRuns(ctx, repo.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 2 || queued[0].ID != first.ID || queued[1].ID != other.ID {
		t.Fatalf("claimable: %+v, want the first of each group", queued)
	}
	if err := claim(second.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("claim of the held-back run: %v, want a conflict", err)
	}
	if holder, _ := db.GroupHolder(ctx, second); holder != first.ID {
		t.Errorf("holder of the second run: %d, want %d", holder, first.ID)
	}
	if err := claim(first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompleteRun(ctx, first.ID, store.RunFinal{State: api.StateSucceeded, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := claim(second.ID); err != nil {
		t.Fatalf("claim once the first ended: %v", err)
	}
}

// cancel-in-progress ends an older queued run of the group at once and asks
// a running one to stop; the running one's cancelled end reads superseded.
func testCreatePipeline_CancelInProgressSupersedesOlderRunsOfTheGroup(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	running := groupRun(t, db, repo, "g", true)
	startSteps(t, db, running.ID, time.Now().Add(time.Minute))
	queued := groupRun(t, db, repo, "g", true)
	newest := groupRun(t, db, repo, "g", true)
	q, _ := db.Run(ctx, queued.ID)
	if q.State != api.StateCancelled || q.Reason != api.ReasonSuperseded || q.SupersededBy != newest.ID {
		t.Errorf("queued older run: %+v", q)
	}
	r, _ := db.Run(ctx, running.ID)
	if !r.CancelRequested || r.State != api.StateRunning {
		t.Fatalf("running older run: %+v, want a cancel request", r)
	}
	done, err := db.CompleteRun(ctx, running.ID, store.RunFinal{State: api.StateCancelled, Reason: api.ReasonCancelled, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if done.Reason != api.ReasonSuperseded {
		t.Errorf("running run ended %s/%s, want cancelled/superseded", done.State, done.Reason)
	}
	// The runner's result sent again (a journal replay) is still accepted.
	if _, err := db.CompleteRun(ctx, running.ID, store.RunFinal{State: api.StateCancelled, Reason: api.ReasonCancelled, At: time.Now()}); err != nil {
		t.Errorf("the same result again: %v", err)
	}
}
