package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"knotless.dev/knotless/internal/store"
)

// Dialect is what differs between the SQL databases a DB runs on.
type Dialect struct {
	// Name is the database's name for messages: "sqlite", "postgres".
	Name string
	// Numbered: placeholders are $1, $2, ... (PostgreSQL) instead of ?.
	// Queries are written with ? and rewritten once per query text.
	Numbered bool
	// IsUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
	IsUnique func(error) bool
	// TxOptions are the options of every transaction DB.tx begins.
	// SQLite serializes writers itself; PostgreSQL runs them SERIALIZABLE,
	// so that the read-then-write transactions below mean on it what they
	// mean on SQLite.
	TxOptions *sql.TxOptions
	// Retryable reports whether a transaction that failed with err may be
	// run again from the start (a serialization failure or a deadlock);
	// nil: never.
	Retryable func(error) bool
	// LockMigrations, when set, is held while migrations are applied, so
	// that replicas starting together apply each migration once.
	LockMigrations func(ctx context.Context) (unlock func(), err error)
}

// DB is a store.Store on a database/sql database of one Dialect.
type DB struct {
	raw     *sql.DB
	db      querier // raw, with placeholders rewritten
	dialect Dialect
	want    int // the highest migration version
}

var _ store.Store = (*DB)(nil)

// New returns a DB on db, applying every migration of migrations (files
// NNNN_name.sql at its root) not applied yet.
func New(ctx context.Context, db *sql.DB, d Dialect, migrations fs.FS) (*DB, error) {
	out := &DB{raw: db, dialect: d}
	out.db = out.wrap(db)
	if err := out.migrate(ctx, migrations); err != nil {
		return nil, fmt.Errorf("migrate %s database: %w", d.Name, err)
	}
	return out, nil
}

// Close implements store.Store.
func (d *DB) Close() error { return d.raw.Close() }

// SQL returns the underlying database, for tools (migration, tests) that
// read tables directly. Its queries take the dialect's own placeholders.
func (d *DB) SQL() *sql.DB { return d.raw }

// Ping implements store.Store: the database answers, and its schema is
// the one this program's migrations make (another replica may have
// migrated it further).
func (d *DB) Ping(ctx context.Context) error {
	v, err := d.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if v < d.want {
		return fmt.Errorf("schema version %d, want %d: migrations not applied", v, d.want)
	}
	return nil
}

// SchemaVersion reports the highest applied migration.
func (d *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v sql.NullInt64
	err := d.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v)
	return int(v.Int64), err
}

// MigrationVersions lists the versions of the migration files in m, in
// order: each backend's list must be the same (they are kept in step).
func MigrationVersions(m fs.FS) ([]int, error) {
	files, err := fs.Glob(m, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range files {
		num, _, ok := strings.Cut(f, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number and '_'", f)
		}
		out = append(out, v)
	}
	sort.Ints(out)
	return out, nil
}

func (d *DB) migrate(ctx context.Context, migrations fs.FS) error {
	if d.dialect.LockMigrations != nil {
		unlock, err := d.dialect.LockMigrations(ctx)
		if err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
		defer unlock()
	}
	if _, err := d.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT  NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	current, err := d.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	versions, err := MigrationVersions(migrations)
	if err != nil {
		return err
	}
	files, _ := fs.Glob(migrations, "*.sql")
	byVersion := map[int]string{}
	for _, f := range files {
		num, _, _ := strings.Cut(f, "_")
		v, _ := strconv.Atoi(num)
		byVersion[v] = f
	}
	if len(versions) > 0 {
		d.want = versions[len(versions)-1]
	}
	for _, v := range versions {
		if v <= current {
			continue
		}
		body, err := fs.ReadFile(migrations, byVersion[v])
		if err != nil {
			return err
		}
		err = d.tx(ctx, func(tx querier) error {
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return fmt.Errorf("apply %s: %w", byVersion[v], err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
				v, ms(time.Now()))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// maxTxAttempts bounds how often tx runs a transaction that keeps failing
// with a retryable error.
const maxTxAttempts = 20

// maxTxBackoff bounds the random wait between two attempts of tx, which
// doubles from 2 ms: the 20 attempts span up to about 2.7 s (1.3 s on
// average).
const maxTxBackoff = 200 * time.Millisecond

// tx runs fn in one transaction, committing when it returns nil. A
// transaction the database aborted to keep transactions serializable is
// run again, from the start, up to maxTxAttempts times: fn must set
// everything it returns through its closure afresh on each call. When the
// last attempt collides too, the error wraps store.ErrBusy.
func (d *DB) tx(ctx context.Context, fn func(querier) error) error {
	for attempt := 1; ; attempt++ {
		err := d.tx1(ctx, fn)
		if err == nil || d.dialect.Retryable == nil || !d.dialect.Retryable(err) {
			return err
		}
		if attempt == maxTxAttempts {
			return fmt.Errorf("%w (%d attempts): %w", store.ErrBusy, attempt, err)
		}
		// Back off, at random and longer each time, so that the
		// transactions that collided do not collide again: many writers
		// at once (thousands of runners registering) collide for longer
		// than a few milliseconds.
		wait := time.Duration(rand.Int64N(int64(min(maxTxBackoff, (2*time.Millisecond)<<min(attempt-1, 16)))))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

func (d *DB) tx1(ctx context.Context, fn func(querier) error) error {
	tx, err := d.raw.BeginTx(ctx, d.dialect.TxOptions)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := fn(d.wrap(tx)); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (d *DB) isUnique(err error) bool { return d.dialect.IsUnique != nil && d.dialect.IsUnique(err) }

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// wrap returns q with its queries' placeholders rewritten for the dialect.
func (d *DB) wrap(q querier) querier {
	if !d.dialect.Numbered {
		return q
	}
	return numbered{q}
}

// numbered rewrites ? placeholders to $1, $2, ... No query here has a ?
// inside a string literal.
type numbered struct{ q querier }

var rebound sync.Map // query text → rewritten text

func rebind(query string) string {
	if v, ok := rebound.Load(query); ok {
		return v.(string)
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	out := b.String()
	rebound.Store(query, out)
	return out
}

func (n numbered) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return n.q.ExecContext(ctx, rebind(query), args...)
}

func (n numbered) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return n.q.QueryContext(ctx, rebind(query), args...)
}

func (n numbered) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return n.q.QueryRowContext(ctx, rebind(query), args...)
}

func (n numbered) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return n.q.PrepareContext(ctx, rebind(query))
}

// noLimit is a LIMIT that limits nothing, on every dialect.
const noLimit = 1 << 62

// ms converts a time to stored milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

// fromMS converts stored milliseconds to a UTC time.
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func nullTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}

func nullInt(v sql.NullInt64) *int {
	if !v.Valid {
		return nil
	}
	i := int(v.Int64)
	return &i
}

func intArg(p *int) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

func jsonList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func parseList(s string) []string {
	var v []string
	_ = json.Unmarshal([]byte(s), &v)
	return v
}

// notFound maps sql.ErrNoRows to store.ErrNotFound, naming what.
func notFound(err error, what string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return fmt.Errorf("read %s: %w", what, err)
}
