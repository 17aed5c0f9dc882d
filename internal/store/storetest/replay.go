package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// A token id recorded through one replica is a replay through the other,
// until it is pruned after it expired.
func testRecordJTI_SeenByEveryReplicaUntilPruned(t *testing.T, replicas Replicas) {
	a, b := replicas(t)
	ctx := context.Background()
	now := time.Now()
	if err := a.RecordJTI(ctx, "k1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := b.RecordJTI(ctx, "k1", now.Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the same token id through the other replica: %v, want ErrConflict", err)
	}
	if err := b.RecordJTI(ctx, "k2", now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := a.PruneJTIs(ctx, now); err != nil || n != 1 {
		t.Fatalf("PruneJTIs = %d, %v; want the one expired", n, err)
	}
	if err := a.RecordJTI(ctx, "k1", now.Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("unexpired token id after a prune: %v, want ErrConflict", err)
	}
}

// Counts groups runs by state and reason, finds the oldest queued run and
// counts approved runners seen since a time.
func testCounts_RunsByStateAndReasonAndRunnersOnline(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	if err := db.Ping(ctx); err != nil {
		t.Fatalf("Ping of a migrated store: %v", err)
	}
	repo, runs := seed(t, db, 3)
	x := claimAll(t, db, repo, runs[:1], time.Now().Add(time.Minute))
	if _, err := db.ApproveRunner(ctx, x.ID); err != nil {
		t.Fatal(err)
	}
	if err := db.TouchRunner(ctx, x.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompleteRun(ctx, runs[0].ID, store.RunFinal{State: api.StateFailed, Reason: api.ReasonExitCode, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c, err := db.Counts(ctx, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"failed/" + api.ReasonExitCode: 1, "queued/": 2}
	got := map[string]int64{}
	for _, rc := range c.Runs {
		got[rc.State+"/"+rc.Reason] = rc.N
	}
	if len(got) != len(want) || got["queued/"] != 2 || got["failed/"+api.ReasonExitCode] != 1 {
		t.Errorf("runs by state/reason: %v, want %v", got, want)
	}
	if c.OldestQueued == nil || c.OldestQueued.UnixMilli() != runs[1].CreatedAt.UnixMilli() {
		t.Errorf("oldest queued: %v, want %v", c.OldestQueued, runs[1].CreatedAt)
	}
	if c.RunnersApproved != 1 || c.RunnersOnline != 1 {
		t.Errorf("runners approved %d, online %d; want 1, 1", c.RunnersApproved, c.RunnersOnline)
	}
	if c, _ := db.Counts(ctx, time.Now().Add(time.Minute)); c.RunnersOnline != 0 {
		t.Errorf("runners online since a minute ahead: %d, want 0", c.RunnersOnline)
	}
}
