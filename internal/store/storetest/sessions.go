package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// claimAll registers runner r1 for repo and has it claim runs with the
// given lease.
func claimAll(t *testing.T, db store.Store, repo store.Repo, runs []store.Run, until time.Time) store.Runner {
	t.Helper()
	ctx := context.Background()
	x, _, err := db.RegisterRunner(ctx, store.Runner{RepoID: repo.ID, Name: "r1", DID: "did:key:r1", PublicKey: "z"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if _, err := db.ClaimRun(ctx, r.ID, store.Claim{RunnerID: x.ID, RunnerName: x.Name,
			TokenHash: fmt.Sprint("tok", r.ID), Now: time.Now(), LeaseUntil: until}); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

func testStartSession_RenewsHeldLeasesAndListsThemOldestFirst(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, runs := seed(t, db, 3)
	past := time.Now().Add(-time.Minute) // lapsed: the sweeper would end them
	x := claimAll(t, db, repo, runs[:2], past)
	if _, err := db.CompleteRun(ctx, runs[1].ID, store.RunFinal{State: api.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ClaimRun(ctx, runs[2].ID, store.Claim{RunnerID: x.ID, RunnerName: x.Name, TokenHash: "t2",
		Now: time.Now(), LeaseUntil: past}); err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	until := now.Add(time.Minute)
	prev, held, err := db.StartSession(ctx, x.ID, "s1", now, until)
	if err != nil {
		t.Fatal(err)
	}
	if prev.Session != "" {
		t.Errorf("first session superseded %q, want none", prev.Session)
	}
	if len(held) != 2 || held[0].ID != runs[0].ID || held[1].ID != runs[2].ID {
		t.Fatalf("held = %v, want runs %d and %d (not the final one), oldest first", ids(held), runs[0].ID, runs[2].ID)
	}
	for _, r := range held {
		if r.LeaseExpires == nil || r.LeaseExpires.UnixMilli() != until.UnixMilli() {
			t.Errorf("run %d lease = %v, want %v", r.ID, r.LeaseExpires, until)
		}
	}
	if lost, err := db.ExpireLeases(ctx, time.Now()); err != nil || len(lost) != 0 {
		t.Fatalf("ExpireLeases after StartSession ended %v (%v), want none", ids(lost), err)
	}

	prev, _, err = db.StartSession(ctx, x.ID, "s2", time.Now(), until)
	if err != nil || prev.Session != "s1" {
		t.Fatalf("second session: prev %q, %v; want s1 superseded", prev.Session, err)
	}
	got, err := db.RunnerByDID(ctx, x.DID)
	if err != nil || got.Session != "s2" || got.SessionStartedAt == nil || got.SessionOpen("s1") || !got.SessionOpen("s2") {
		t.Fatalf("runner after second session = %+v, %v", got, err)
	}
	if _, _, err := db.StartSession(ctx, 999, "s3", time.Now(), until); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("session of an absent runner: err = %v, want ErrNotFound", err)
	}
}

func testHandOver_ExtendsLeasesEndsSessionAndALapseSaysHandedOver(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, runs := seed(t, db, 2)
	x := claimAll(t, db, repo, runs, time.Now().Add(time.Minute))
	if _, _, err := db.StartSession(ctx, x.ID, "s1", time.Now(), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.HandOver(ctx, x.ID, "old", time.Now(), time.Now().Add(time.Hour)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("hand over a session that is not current: err = %v, want ErrConflict", err)
	}
	if _, err := db.CancelRun(ctx, runs[1].ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	grace := at.Add(time.Hour)
	held, err := db.HandOver(ctx, x.ID, "s1", at, grace)
	if err != nil || len(held) != 2 {
		t.Fatalf("HandOver = %v, %v; want both runs", ids(held), err)
	}
	for _, r := range held {
		if r.LeaseExpires.UnixMilli() != grace.UnixMilli() {
			t.Errorf("run %d lease = %v, want the grace %v", r.ID, r.LeaseExpires, grace)
		}
	}
	got, _ := db.RunnerByDID(ctx, x.DID)
	if got.SessionOpen("s1") || got.HandedOverAt == nil || got.HandoverUntil == nil || got.HandoverUntil.UnixMilli() != grace.UnixMilli() {
		t.Fatalf("runner after handover = %+v", got)
	}
	if _, err := db.HandOver(ctx, x.ID, "s1", time.Now(), grace); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second handover of the same session: err = %v, want ErrConflict", err)
	}
	// Leases lapse after the grace: the message names the handover.
	lost, err := db.ExpireLeases(ctx, grace.Add(time.Second))
	if err != nil || len(lost) != 2 {
		t.Fatalf("ExpireLeases = %v, %v; want both runs", ids(lost), err)
	}
	if r := lost[0]; r.State != api.StateErrored || r.Reason != api.ReasonRunnerLost ||
		!strings.Contains(r.Message, "handed the run over at "+at.UTC().Format(time.RFC3339)) ||
		!strings.Contains(r.Message, "no new runner process took it") {
		t.Errorf("lapsed handed-over run = %s/%s %q", r.State, r.Reason, r.Message)
	}
	if r := lost[1]; r.State != api.StateCancelled || !strings.Contains(r.Message, "handed the run over") {
		t.Errorf("lapsed handed-over cancel-requested run = %s/%s %q", r.State, r.Reason, r.Message)
	}
}

func testStartSession_AfterHandoverClearsItAndALapseIsPlainRunnerLost(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, runs := seed(t, db, 1)
	x := claimAll(t, db, repo, runs, time.Now().Add(time.Minute))
	if _, _, err := db.StartSession(ctx, x.ID, "s1", time.Now(), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.HandOver(ctx, x.ID, "s1", time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	prev, held, err := db.StartSession(ctx, x.ID, "s2", time.Now(), until)
	if err != nil || prev.HandedOverAt == nil || len(held) != 1 {
		t.Fatalf("StartSession after handover: prev %+v, held %v, %v", prev, ids(held), err)
	}
	got, _ := db.RunnerByDID(ctx, x.DID)
	if got.HandedOverAt != nil || got.HandoverUntil != nil || !got.SessionOpen("s2") {
		t.Fatalf("runner = %+v; want the handover cleared and s2 open", got)
	}
	lost, err := db.ExpireLeases(ctx, until.Add(time.Second))
	if err != nil || len(lost) != 1 || !strings.Contains(lost[0].Message, "stopped renewing the lease") {
		t.Fatalf("lapse after a new session: %+v, %v; want the plain runner-lost message", lost, err)
	}
}

func testClaimRun_EndedSessionClaimsNothing(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, runs := seed(t, db, 1)
	x := claimAll(t, db, repo, nil, time.Time{})
	if _, _, err := db.StartSession(ctx, x.ID, "s1", time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.StartSession(ctx, x.ID, "s2", time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := store.Claim{RunnerID: x.ID, RunnerName: x.Name, TokenHash: "t", Session: "s1", Now: now, LeaseUntil: now.Add(time.Minute)}
	if _, err := db.ClaimRun(ctx, runs[0].ID, c); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("claim with a superseded session: err = %v, want ErrConflict", err)
	}
	c.Session = "s2"
	if r, err := db.ClaimRun(ctx, runs[0].ID, c); err != nil || r.State != api.StateClaimed {
		t.Fatalf("claim with the current session = %+v, %v", r, err)
	}
}

func testRotateRunToken_OldTokenStopsAtOnce(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, runs := seed(t, db, 2)
	x := claimAll(t, db, repo, runs, time.Now().Add(time.Second))
	until := time.Now().Add(time.Hour)
	r, err := db.RotateRunToken(ctx, runs[0].ID, x.ID, "new", until)
	if err != nil || r.LeaseExpires.UnixMilli() != until.UnixMilli() {
		t.Fatalf("RotateRunToken = %+v, %v", r, err)
	}
	if _, err := db.RunByToken(ctx, fmt.Sprint("tok", runs[0].ID)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("old token: err = %v, want ErrNotFound", err)
	}
	if got, err := db.RunByToken(ctx, "new"); err != nil || got.ID != runs[0].ID {
		t.Errorf("new token = run %d, %v", got.ID, err)
	}
	if _, err := db.RotateRunToken(ctx, runs[0].ID, x.ID+1, "other", until); !errors.Is(err, store.ErrConflict) {
		t.Errorf("another runner: err = %v, want ErrConflict", err)
	}
	if _, err := db.CompleteRun(ctx, runs[1].ID, store.RunFinal{State: api.StateFailed}); err != nil {
		t.Fatal(err)
	}
	if r, err := db.RotateRunToken(ctx, runs[1].ID, x.ID, "late", until); !errors.Is(err, store.ErrRunFinished) || r.State != api.StateFailed {
		t.Errorf("final run: %s, err = %v; want the run and ErrRunFinished", r.State, err)
	}
	if _, err := db.RotateRunToken(ctx, 999, x.ID, "none", until); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("absent run: err = %v, want ErrNotFound", err)
	}
}

func testExtendLeases_NeverShortensAHandoverGrace(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, runs := seed(t, db, 1)
	grace := time.Now().Add(time.Hour)
	claimAll(t, db, repo, runs, grace)
	if n, err := db.ExtendLeases(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("ExtendLeases = %d, %v", n, err)
	}
	if r, _ := db.Run(ctx, runs[0].ID); r.LeaseExpires.UnixMilli() != grace.UnixMilli() {
		t.Fatalf("lease = %v, want it kept at %v", r.LeaseExpires, grace)
	}
}

func ids(runs []store.Run) []int64 {
	out := []int64{}
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}
