package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store"
)

func TestOpen_MigratesEachAccountsTokenToOneNamedInitial(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "knotless.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`}
	for i, f := range []string{"0001_init.sql", "0002_runner_sessions.sql", "0003_run_outputs.sql"} {
		b, err := migrations.ReadFile("migrations/" + f)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, string(b), `INSERT INTO schema_migrations VALUES (`+string(rune('1'+i))+`, 0)`)
	}
	qs = append(qs,
		`INSERT INTO accounts (id, handle, did, admin, created_at) VALUES (1, 'admin', 'did:key:admin', 1, 0), (2, 'alice', 'did:key:alice', 0, 0)`,
		`INSERT INTO tokens (hash, account_id, created_at) VALUES ('h-admin', 1, 10), ('h-alice', 2, 20), ('h-alice2', 2, 30)`)
	for _, q := range qs {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("build a 0003 database: %v", err)
		}
	}
	raw.Close()

	db, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open a 0003 database: %v", err)
	}
	defer db.Close()
	for hash, handle := range map[string]string{"h-admin": "admin", "h-alice": "alice", "h-alice2": "alice"} {
		if a, err := db.AccountByToken(ctx, hash, time.Now()); err != nil || a.Handle != handle || a.Disabled {
			t.Errorf("token %s after migration: %+v, %v", hash, a, err)
		}
	}
	ts, err := db.ListTokens(ctx, 2)
	if err != nil || len(ts) != 2 || ts[0].Name != "initial" || ts[1].Name != "initial-2" || ts[0].CreatedAt.UnixMilli() != 20 {
		t.Errorf("alice's tokens after migration: %+v, %v", ts, err)
	}
}

func TestToken_ExpiryDisabledAndLastUsedAtMostEveryMinute(t *testing.T) {
	db, _ := open(t)
	ctx := context.Background()
	a, err := db.CreateAccount(ctx, store.Account{Handle: "alice", DID: "did:key:alice"}, "h1")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	exp := t0.Add(time.Hour)
	if _, err := db.CreateToken(ctx, store.Token{AccountID: a.ID, Name: "ci", Hash: "h2", CreatedAt: t0, ExpiresAt: &exp}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateToken(ctx, store.Token{AccountID: a.ID, Name: "ci", Hash: "h3"}, 0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a taken name: %v, want ErrConflict", err)
	}
	if _, err := db.CreateToken(ctx, store.Token{AccountID: a.ID, Name: "more", Hash: "h4"}, 2); !errors.Is(err, store.ErrLimit) {
		t.Errorf("past the cap: %v, want ErrLimit", err)
	}
	lastUsed := func() *time.Time {
		ts, err := db.ListTokens(ctx, a.ID)
		if err != nil || len(ts) != 2 || ts[0].Name != "ci" {
			t.Fatalf("tokens: %+v, %v", ts, err)
		}
		return ts[0].LastUsedAt
	}
	if lastUsed() != nil {
		t.Fatal("an unused token has a last use")
	}
	if _, err := db.AccountByToken(ctx, "h2", t0); err != nil {
		t.Fatal(err)
	}
	if u := lastUsed(); u == nil || u.UnixMilli() != t0.UnixMilli() {
		t.Fatalf("last used %v, want %v", u, t0)
	}
	db.AccountByToken(ctx, "h2", t0.Add(30*time.Second))
	if u := lastUsed(); u.UnixMilli() != t0.UnixMilli() {
		t.Errorf("last used rewritten after 30 s: %v", u)
	}
	db.AccountByToken(ctx, "h2", t0.Add(61*time.Second))
	if u := lastUsed(); u.UnixMilli() != t0.Add(61*time.Second).UnixMilli() {
		t.Errorf("last used not rewritten after 61 s: %v", u)
	}
	if _, err := db.AccountByToken(ctx, "h2", exp); !errors.Is(err, store.ErrTokenExpired) {
		t.Errorf("at its expiry: %v, want ErrTokenExpired", err)
	}
	if _, err := db.SetAccountDisabled(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AccountByToken(ctx, "h1", t0); !errors.Is(err, store.ErrAccountDisabled) {
		t.Errorf("disabled: %v, want ErrAccountDisabled", err)
	}
	if _, err := db.SetAccountDisabled(ctx, "nosuch", true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("disabling nobody: %v", err)
	}
	if err := db.DeleteToken(ctx, a.ID, "ci", true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AccountByToken(ctx, "h2", t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted token: %v, want ErrNotFound", err)
	}
	if err := db.DeleteToken(ctx, a.ID, "initial", true); !errors.Is(err, store.ErrLimit) {
		t.Errorf("deleting the last token: %v, want ErrLimit", err)
	}
	if ts, _ := db.ListTokens(ctx, a.ID); len(ts) != 1 {
		t.Errorf("the refused delete removed it: %+v", ts)
	}
}
