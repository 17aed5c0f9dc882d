package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// claimAll registers runner r1 for repo and has it claim runs with the
// given lease.
func claimAll(t *testing.T, db *DB, repo store.Repo, runs []store.Run, until time.Time) store.Runner {
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

func TestStartSession_RenewsHeldLeasesAndListsThemOldestFirst(t *testing.T) {
	db, _ := open(t)
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

func TestHandOver_ExtendsLeasesEndsSessionAndALapseSaysHandedOver(t *testing.T) {
	db, _ := open(t)
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

func TestStartSession_AfterHandoverClearsItAndALapseIsPlainRunnerLost(t *testing.T) {
	db, _ := open(t)
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

func TestClaimRun_EndedSessionClaimsNothing(t *testing.T) {
	db, _ := open(t)
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

func TestRotateRunToken_OldTokenStopsAtOnce(t *testing.T) {
	db, _ := open(t)
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

func TestExtendLeases_NeverShortensAHandoverGrace(t *testing.T) {
	db, _ := open(t)
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

// TestOpen_MigratesA0001DatabaseKeepingItsData builds a database as a
// server of migration 0001 left it and opens it: the runner sessions
// columns are added and every row stays.
func TestOpen_MigratesA0001DatabaseKeepingItsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "knotless.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	first, err := migrations.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`,
		string(first),
		`INSERT INTO schema_migrations VALUES (1, 0)`,
		`INSERT INTO accounts (id, handle, did, created_at) VALUES (1, 'alice', 'did:key:alice', 0)`,
		`INSERT INTO repos (id, owner_id, name, created_at) VALUES (1, 1, 'app', 0)`,
		`INSERT INTO runners (id, repo_id, name, did, public_key, labels, status, created_at, last_seen_at)
			VALUES (7, 1, 'r1', 'did:key:r1', 'zKey', '["linux"]', 'approved', 1000, 2000)`,
		`INSERT INTO pipelines (id, repo_id, ref, sha, event, created_at) VALUES (1, 1, 'refs/heads/main', 'abc', 'push', 0)`,
		`INSERT INTO runs (id, pipeline_id, repo_id, workflow, workflow_path, source, state, runner_id, runner_name,
			token_hash, created_at, lease_expires) VALUES (3, 1, 1, 'ci', '.knotless/workflows/ci.yml', 'src', 'running', 7, 'r1', 'tok', 0, 5000)`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("build a 0001 database: %v", err)
		}
	}
	raw.Close()

	db, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open a 0001 database: %v", err)
	}
	defer db.Close()
	if v, _ := db.SchemaVersion(ctx); v < 2 {
		t.Fatalf("schema version %d after open, want >= 2", v)
	}
	x, err := db.RunnerByDID(ctx, "did:key:r1")
	if err != nil {
		t.Fatal(err)
	}
	if x.ID != 7 || x.Name != "r1" || x.Repo != "alice/app" || x.Status != api.RunnerApproved || x.PublicKey != "zKey" ||
		len(x.Labels) != 1 || x.LastSeenAt == nil || x.LastSeenAt.UnixMilli() != 2000 {
		t.Errorf("runner after migration = %+v", x)
	}
	if x.Session != "" || x.SessionStartedAt != nil || x.HandedOverAt != nil || x.HandoverUntil != nil {
		t.Errorf("runner has a session after migration: %+v", x)
	}
	if r, err := db.RunByToken(ctx, "tok"); err != nil || r.ID != 3 || r.State != api.StateRunning {
		t.Errorf("run after migration = %+v, %v", r, err)
	}
	_, held, err := db.StartSession(ctx, 7, "s1", time.Now(), time.Now().Add(time.Minute))
	if err != nil || len(held) != 1 || held[0].ID != 3 {
		t.Errorf("StartSession on the migrated database: %v, %v", ids(held), err)
	}
}

func ids(runs []store.Run) []int64 {
	out := []int64{}
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}
