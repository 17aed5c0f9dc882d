package sqlite

import (
	"context"
	"database/sql"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/storetest"
)

func open(t *testing.T, path string) store.Store {
	t.Helper()
	db, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestStore runs the behavioural suite of store.Store on SQLite; its two
// "replicas" are two connections pools on one database file, as two
// processes would hold it.
func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		Open: func(t *testing.T) store.Store { return open(t, filepath.Join(t.TempDir(), "knotless.db")) },
		Replicas: func(t *testing.T) (store.Store, store.Store) {
			path := filepath.Join(t.TempDir(), "knotless.db")
			return open(t, path), open(t, path)
		},
	})
}

func ids(runs []store.Run) []int64 {
	out := []int64{}
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
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
	first, err := fs.ReadFile(Migrations, "0001_init.sql")
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

func TestOpen_MigratesOnceAndReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "knotless.db")
	db, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := db.SchemaVersion(context.Background())
	if err != nil || v < 1 {
		t.Fatalf("schema version %d, %v", v, err)
	}
	if _, err := db.CreateAccount(context.Background(), store.Account{Handle: "alice", DID: "did:key:alice"}, "hash-alice"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db2, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db2.Close()
	if v2, _ := db2.SchemaVersion(context.Background()); v2 != v {
		t.Fatalf("version after reopen %d, want %d", v2, v)
	}
	if _, err := db2.AccountByToken(context.Background(), "hash-alice", time.Now()); err != nil {
		t.Fatalf("account lost across reopen: %v", err)
	}
}

func TestOpen_MigratesEachAccountsTokenToOneNamedInitial(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "knotless.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`}
	for i, f := range []string{"0001_init.sql", "0002_runner_sessions.sql", "0003_run_outputs.sql"} {
		b, err := fs.ReadFile(Migrations, f)
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
