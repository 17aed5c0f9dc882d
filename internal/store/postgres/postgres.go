package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the numbered schema migrations (NNNN_name.sql), kept in
// step with sqlite.Migrations.
var Migrations, _ = fs.Sub(migrations, "migrations")

// DefaultMaxConns is the size of a DB's connection pool; Listen and each
// Lock held take one connection more, outside it.
const DefaultMaxConns = 20

// DB is a store.Store and store.Coordinator on one PostgreSQL database.
type DB struct {
	*sqlstore.DB
	cfg *pgx.ConnConfig
}

var (
	_ store.Store       = (*DB)(nil)
	_ store.Coordinator = (*DB)(nil)
)

// IsURL reports whether database names a PostgreSQL database
// (postgres:// or postgresql://).
func IsURL(database string) bool {
	return strings.HasPrefix(database, "postgres://") || strings.HasPrefix(database, "postgresql://")
}

// Open connects to the database at url (postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=...,
// libpq's form) and applies every pending migration, one replica at a time
// (an advisory lock). An unreachable database is an error naming it
// without its password.
func Open(ctx context.Context, url string) (*DB, error) {
	db, cfg, err := OpenSQL(ctx, url)
	if err != nil {
		return nil, err
	}
	d := &DB{cfg: cfg}
	dialect := Dialect
	dialect.LockMigrations = func(ctx context.Context) (func(), error) {
		l, err := d.Lock(ctx, store.LockMigrations, 0)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
	if d.DB, err = sqlstore.New(ctx, db, dialect, Migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("database %s: %w", Redact(url), err)
	}
	return d, nil
}

// OpenSQL connects to the database at url as Open does, without
// migrating it.
func OpenSQL(ctx context.Context, url string) (*sql.DB, *pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("database URL %s: %w", Redact(url), err)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(DefaultMaxConns)
	db.SetMaxIdleConns(DefaultMaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("connect to database %s (is PostgreSQL running, and the URL right?): %w", Redact(url), err)
	}
	return db, cfg, nil
}

// Redact returns url with its password replaced by xxxxx, for messages.
func Redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if u, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + u + ":xxxxx@" + host
	}
	return url
}

// Dialect is PostgreSQL's for sqlstore: $n placeholders, SERIALIZABLE
// transactions retried on serialization failures and deadlocks.
var Dialect = sqlstore.Dialect{
	Name:     "postgres",
	Numbered: true,
	IsUnique: func(err error) bool { return sqlState(err) == "23505" },
	TxOptions: &sql.TxOptions{
		Isolation: sql.LevelSerializable,
	},
	Retryable: func(err error) bool {
		s := sqlState(err)
		return s == "40001" || s == "40P01"
	},
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
