package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"knotless.dev/knotless/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the numbered schema migrations (NNNN_name.sql), kept in
// step with postgres.Migrations.
var Migrations, _ = fs.Sub(migrations, "migrations")

// DB is a store.Store backed by one SQLite file.
type DB = sqlstore.DB

// Dialect is SQLite's for sqlstore.
var Dialect = sqlstore.Dialect{Name: "sqlite", IsUnique: isUnique}

// Open opens the database file at path, creating it with mode 0600 if
// missing (its directory must exist), and applies every pending
// migration. Explicit transactions take the write lock at BEGIN (no lock
// upgrades, so no SQLITE_BUSY deadlocks), and a writer waits up to 10 s
// for another to finish.
func Open(ctx context.Context, path string) (*DB, error) {
	// SQLite gives the -wal and -shm files the database file's mode: made
	// here first, they are 0600 too, whatever the umask.
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		f.Close()
	}
	db, err := OpenSQL(path)
	if err != nil {
		return nil, err
	}
	d, err := sqlstore.New(ctx, db, Dialect, Migrations)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	return d, nil
}

// OpenSQL opens the database file at path as Open does, without
// migrating it.
func OpenSQL(path string) (*sql.DB, error) {
	dsn := "file:" + path + "?_txlock=immediate" +
		"&_pragma=busy_timeout(10000)" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(NORMAL)" +
		"&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	return db, nil
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}
