package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store"
)

func init() {
	tests = append(tests, struct {
		name string
		fn   func(*testing.T, Opener)
	}{"Objects_ARunWhoseBytesExpiredIsNeverToMove", testObjects_ARunWhoseBytesExpiredIsNeverToMove})
}

// RunsToMove skips a run whose bytes retention removed (recorded by
// MarkRunExpired), moved before or not, and still lists one measured and
// kept. The failure it pins: every full scan of the mover (each restart,
// every 10 minutes) "moving" each expired run again, logging
// "logs=0 outputs=false" for it.
func testObjects_ARunWhoseBytesExpiredIsNeverToMove(t *testing.T, open Opener) {
	st := open(t)
	db, ok := st.(store.Objects)
	if !ok {
		t.Skip("this store records no moves to an object store")
	}
	ctx := context.Background()
	repo, _ := seed(t, st, 1)
	now := time.Now().UTC().Truncate(time.Millisecond)
	kept := endedPipeline(t, st, repo, "refs/heads/main", now.Add(-3*time.Hour))
	expired := endedPipeline(t, st, repo, "refs/heads/main", now.Add(-2*time.Hour))
	movedThenExpired := endedPipeline(t, st, repo, "refs/heads/main", now.Add(-time.Hour))
	measureAll(t, st, now)
	if err := db.RecordMoved(ctx, store.MovedRun{RunID: movedThenExpired, MovedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{expired, movedThenExpired} {
		if ok, err := st.MarkRunExpired(ctx, id, now); !ok || err != nil {
			t.Fatalf("MarkRunExpired(%d) = %v, %v", id, ok, err)
		}
	}
	if err := db.ForgetMoved(ctx, movedThenExpired); err != nil { // retention forgets the objects it removed
		t.Fatal(err)
	}
	ids, err := db.RunsToMove(ctx, 0, time.Time{}, now.Add(time.Hour), 10)
	if err != nil || !slices.Equal(ids, []int64{kept}) {
		t.Errorf("RunsToMove = %v, %v; want only the kept run %d (not the expired %d, %d)", ids, err, kept, expired, movedThenExpired)
	}
}
