package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/postgres"
	"knotless.dev/knotless/internal/store/postgres/pgtest"
	"knotless.dev/knotless/internal/store/sqlite"
	"knotless.dev/knotless/internal/store/sqlstore"
	"knotless.dev/knotless/internal/store/storetest"
)

func open(t *testing.T, url string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestStore runs the behavioural suite of store.Store on a real PostgreSQL
// server; each test gets a database of its own, and its two "replicas"
// are two connection pools on one database.
func TestStore(t *testing.T) {
	pg := pgtest.Start(t)
	storetest.Run(t, storetest.Backend{
		Open: func(t *testing.T) store.Store { return open(t, pg.Database(t)) },
		Replicas: func(t *testing.T) (store.Store, store.Store) {
			url := pg.Database(t)
			return open(t, url), open(t, url)
		},
	})
}

// The two backends' migrations are kept in step: the same numbers.
func TestMigrations_InStepWithSQLite(t *testing.T) {
	pg, err := sqlstore.MigrationVersions(postgres.Migrations)
	if err != nil {
		t.Fatal(err)
	}
	lite, err := sqlstore.MigrationVersions(sqlite.Migrations)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pg, lite) || len(pg) == 0 {
		t.Fatalf("postgres migrations %v, sqlite %v: add the twin of each", pg, lite)
	}
}

// A notification reaches every listener, and a lock is held by one
// replica at a time: the second waits until the first's holder releases
// it, or until its connection dies (a replica killed).
func TestCoordinator_NotifyReachesListenersAndLocksAreExclusive(t *testing.T) {
	pg := pgtest.Start(t)
	url := pg.Database(t)
	a, b := open(t, url), open(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan string, 10)
	resynced := make(chan struct{}, 10)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go b.Listen(lctx, func() { resynced <- struct{}{} }, func(p string) { got <- p })
	<-resynced // listening
	if err := a.Notify(ctx, "run:7"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "run:7" {
			t.Fatalf("payload %q", p)
		}
	case <-ctx.Done():
		t.Fatal("no notification")
	}

	l, err := a.Lock(ctx, store.LockSweeper, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.TryLock(ctx, store.LockSweeper, 0); ok || err != nil {
		t.Fatalf("TryLock of a held lock: %v, %v; want not taken", ok, err)
	}
	if err := l.Held(ctx); err != nil {
		t.Fatalf("Held: %v", err)
	}
	l.Release()
	l2, ok, err := b.TryLock(ctx, store.LockSweeper, 0)
	if !ok || err != nil {
		t.Fatalf("TryLock of a released lock: %v, %v", ok, err)
	}
	// The holder's connection ends as a killed process's would: the
	// database frees the lock.
	var pid int
	if err := a.SQL().QueryRowContext(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SQL().ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := l2.Held(ctx); err == nil {
		t.Fatal("Held after the holder's connection died: nil, want an error")
	}
	l3, err := a.Lock(ctx, store.LockSweeper, 0)
	if err != nil {
		t.Fatalf("lock after the holder died: %v", err)
	}
	l3.Release()
}
