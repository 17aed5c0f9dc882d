package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store"
)

func init() {
	tests = append(tests, struct {
		name string
		fn   func(*testing.T, Opener)
	}{"Objects_OnlyEndedRunsAreToMoveAndARecordedMoveIsWholeUntilForgotten", testObjects_OnlyEndedRunsAreToMoveAndARecordedMoveIsWholeUntilForgotten},
		struct {
			name string
			fn   func(*testing.T, Opener)
		}{"Objects_ARunWhoseBytesExpiredIsNeverToMove", testObjects_ARunWhoseBytesExpiredIsNeverToMove})
}

// objectsStore opens a store and its store.Objects, skipping the test for
// a store that records no moves.
func objectsStore(t *testing.T, open Opener) (store.Store, store.Objects) {
	st := open(t)
	db, ok := st.(store.Objects)
	if !ok {
		t.Skip("this store records no moves to an object store")
	}
	return st, db
}

// RunsToMove lists ended runs only, in the window of their end, until
// their move is recorded and cleaned; a recorded move reads back whole
// (outputs flag, every log by step), is recorded once, and ForgetMoved
// makes the run one to move again. The failure it pins: a run still
// running listed to move (its live log would leave DATA), or a move
// readers see without its logs.
func testObjects_OnlyEndedRunsAreToMoveAndARecordedMoveIsWholeUntilForgotten(t *testing.T, open Opener) {
	st, db := objectsStore(t, open)
	ctx := context.Background()
	_, runs := seed(t, st, 3)
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	for _, r := range runs[:2] {
		if _, err := st.CancelRun(ctx, r.ID, t0); err != nil {
			t.Fatal(err)
		}
	}
	far := t0.Add(time.Hour)
	ids, err := db.RunsToMove(ctx, 0, time.Time{}, far, 10)
	if err != nil || !slices.Equal(ids, []int64{runs[0].ID, runs[1].ID}) {
		t.Fatalf("RunsToMove = %v, %v; want the two ended runs %d, %d (not the queued %d)", ids, err, runs[0].ID, runs[1].ID, runs[2].ID)
	}
	if ids, _ := db.RunsToMove(ctx, runs[0].ID, time.Time{}, far, 10); !slices.Equal(ids, []int64{runs[1].ID}) {
		t.Errorf("RunsToMove after the first = %v, want [%d]", ids, runs[1].ID)
	}
	if ids, _ := db.RunsToMove(ctx, 0, time.Time{}, t0, 10); len(ids) != 0 {
		t.Errorf("RunsToMove of runs ended before their end = %v, want none", ids)
	}
	if ids, _ := db.RunsToMove(ctx, 0, t0.Add(time.Millisecond), far, 10); len(ids) != 0 {
		t.Errorf("RunsToMove of runs ended after their end = %v, want none", ids)
	}
	if _, err := db.MovedRun(ctx, runs[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("MovedRun before any move: %v, want ErrNotFound", err)
	}
	m := store.MovedRun{RunID: runs[0].ID, Outputs: true, MovedAt: t0.Add(time.Minute),
		Logs: []store.MovedLog{{Step: 0, Size: 10, TimesSize: 32}, {Step: 1, Size: 1 << 40}}}
	if err := db.RecordMoved(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := db.RecordMoved(ctx, m); !errors.Is(err, store.ErrConflict) {
		t.Errorf("recording the move again: %v, want ErrConflict", err)
	}
	if err := db.RecordMoved(ctx, store.MovedRun{RunID: 999_999}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("recording a move of no run: %v, want ErrNotFound", err)
	}
	got, err := db.MovedRun(ctx, m.RunID)
	if err != nil || got.RunID != m.RunID || !got.Outputs || !got.MovedAt.Equal(m.MovedAt) || got.Cleaned || !slices.Equal(got.Logs, m.Logs) {
		t.Fatalf("MovedRun = %+v, %v; want %+v", got, err, m)
	}
	if l, err := db.MovedLog(ctx, m.RunID, 1); err != nil || l != m.Logs[1] {
		t.Errorf("MovedLog step 1 = %+v, %v", l, err)
	}
	if _, err := db.MovedLog(ctx, m.RunID, 2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MovedLog of a step with no log moved: %v, want ErrNotFound", err)
	}
	if ids, _ := db.RunsToMove(ctx, 0, time.Time{}, far, 10); !slices.Equal(ids, []int64{runs[0].ID, runs[1].ID}) {
		t.Errorf("RunsToMove with the move recorded, not cleaned = %v; want it still listed", ids)
	}
	if err := db.MarkCleaned(ctx, m.RunID); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.MovedRun(ctx, m.RunID); !got.Cleaned {
		t.Errorf("MovedRun after MarkCleaned: %+v, want cleaned", got)
	}
	if ids, _ := db.RunsToMove(ctx, 0, time.Time{}, far, 10); !slices.Equal(ids, []int64{runs[1].ID}) {
		t.Errorf("RunsToMove with the move cleaned = %v, want [%d]", ids, runs[1].ID)
	}
	if err := db.ForgetMoved(ctx, m.RunID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MovedLog(ctx, m.RunID, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MovedLog after ForgetMoved: %v, want ErrNotFound", err)
	}
	if err := db.ForgetMoved(ctx, m.RunID); err != nil {
		t.Errorf("ForgetMoved again: %v", err)
	}
	if ids, _ := db.RunsToMove(ctx, 0, time.Time{}, far, 1); !slices.Equal(ids, []int64{runs[0].ID}) {
		t.Errorf("RunsToMove, limit 1, after ForgetMoved = %v, want [%d]", ids, runs[0].ID)
	}
}

// RunsToMove skips a run whose bytes retention removed (recorded by
// MarkRunExpired), moved before or not, and still lists one measured and
// kept. The failure it pins: every full scan of the mover (each restart,
// every 10 minutes) "moving" each expired run again, logging
// "logs=0 outputs=false" for it.
func testObjects_ARunWhoseBytesExpiredIsNeverToMove(t *testing.T, open Opener) {
	st, db := objectsStore(t, open)
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
