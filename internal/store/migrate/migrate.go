package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"knotless.dev/knotless/internal/store/postgres"
	"knotless.dev/knotless/internal/store/sqlite"
)

// Tables lists the tables copied, parents before children (foreign keys).
// Every table of the SQLite schema but schema_migrations must be here:
// SQLiteToPostgres refuses a database with a table it does not know
// (TestTables_EveryTableOfTheSchemaIsCopied pins it for each migration).
var Tables = []string{
	"accounts", "tokens", "repos", "pipelines", "runs", "steps", "runners", "secrets",
	"run_outputs", "run_output_entries", "registration_tokens", "web_sessions", "runner_processes",
	"service_auth_jtis", "run_needs", "moved_runs", "moved_logs", "repo_retention", "run_bytes",
	"repo_cache_usage", "schedules",
}

// identityTables have an id column whose sequence must pass the copied ids.
var identityTables = []string{"accounts", "tokens", "repos", "pipelines", "runs", "runners", "schedules"}

// SchemaTables lists the tables of a SQLite database's schema, by name,
// leaving out schema_migrations (the migrations' own record) and SQLite's
// internal tables.
func SchemaTables(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'
		AND name NOT LIKE 'sqlite_%' AND name <> 'schema_migrations' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list the SQLite tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, rows.Err()
}

// checkTables refuses a SQLite database with a table Tables does not
// copy, so that a migration never silently leaves rows behind.
func checkTables(ctx context.Context, db *sql.DB) error {
	have, err := SchemaTables(ctx, db)
	if err != nil {
		return err
	}
	for _, t := range have {
		if !slices.Contains(Tables, t) {
			return fmt.Errorf("the SQLite database has a table %s that this migrate does not copy (a newer server's database?); nothing was copied", t)
		}
	}
	return nil
}

// Table is what was copied of one table.
type Table struct {
	Name string
	Rows int64
}

// SQLiteToPostgres copies the SQLite database at path (migrated to the
// newest schema first, as a server start would) into the empty PostgreSQL
// database at url (made by postgres.Open's migrations), in one PostgreSQL
// transaction: all or nothing. The server must be stopped meanwhile.
// progress, when set, is called after each table.
func SQLiteToPostgres(ctx context.Context, path, url string, progress func(Table)) ([]Table, error) {
	lite, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer lite.Close()
	if err := checkTables(ctx, lite.SQL()); err != nil {
		return nil, err
	}
	pg, err := postgres.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pg.Close()
	lv, err := lite.SchemaVersion(ctx)
	if err != nil {
		return nil, err
	}
	if pv, err := pg.SchemaVersion(ctx); err != nil || pv != lv {
		return nil, fmt.Errorf("schema versions differ: SQLite %d, PostgreSQL %d (%v): use one knotless-server version for both", lv, pv, err)
	}
	for _, t := range Tables {
		var n int64
		if err := pg.SQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t).Scan(&n); err != nil {
			return nil, fmt.Errorf("count rows of %s in PostgreSQL: %w", t, err)
		}
		if n > 0 {
			return nil, fmt.Errorf("the PostgreSQL database holds %d rows of %s already: migrate into a new, empty database", n, t)
		}
	}
	conn, err := pg.SQL().Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var out []Table
	err = conn.Raw(func(dc any) error {
		c := dc.(*stdlib.Conn).Conn()
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		for _, t := range Tables {
			n, err := copyTable(ctx, lite.SQL(), tx, t)
			if err != nil {
				return fmt.Errorf("copy %s: %w", t, err)
			}
			out = append(out, Table{Name: t, Rows: n})
			if progress != nil {
				progress(out[len(out)-1])
			}
		}
		for _, t := range identityTables {
			if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('`+t+`', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM `+t); err != nil {
				return fmt.Errorf("move the id sequence of %s: %w", t, err)
			}
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		return nil, err
	}
	for _, t := range out {
		var n int64
		if err := pg.SQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.Name).Scan(&n); err != nil {
			return out, err
		}
		if n != t.Rows {
			return out, fmt.Errorf("%s: %d rows in PostgreSQL after the copy, %d in SQLite", t.Name, n, t.Rows)
		}
	}
	return out, nil
}

// copyTable copies every row of table from SQLite into tx with COPY, the
// columns as PostgreSQL lists them; SQLite's 0/1 become booleans where
// PostgreSQL has a boolean column.
func copyTable(ctx context.Context, lite *sql.DB, tx pgx.Tx, table string) (int64, error) {
	rows, err := tx.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		return 0, err
	}
	var cols []string
	var boolean []bool
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			rows.Close()
			return 0, err
		}
		cols = append(cols, name)
		boolean = append(boolean, typ == "boolean")
	}
	rows.Close()
	if len(cols) == 0 {
		return 0, errors.New("no such table in PostgreSQL")
	}
	src, err := lite.QueryContext(ctx, `SELECT `+strings.Join(cols, ", ")+` FROM `+table)
	if err != nil {
		return 0, fmt.Errorf("read SQLite: %w", err)
	}
	defer src.Close()
	return tx.CopyFrom(ctx, pgx.Identifier{table}, cols, &sqliteRows{rows: src, n: len(cols), boolean: boolean})
}

// sqliteRows is a pgx.CopyFromSource over SQLite rows.
type sqliteRows struct {
	rows    *sql.Rows
	n       int
	boolean []bool
	vals    []any
	err     error
}

func (s *sqliteRows) Next() bool {
	if !s.rows.Next() {
		return false
	}
	vals := make([]any, s.n)
	ptrs := make([]any, s.n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if s.err = s.rows.Scan(ptrs...); s.err != nil {
		return false
	}
	for i, v := range vals {
		if s.boolean[i] {
			if n, ok := v.(int64); ok {
				vals[i] = n != 0
			}
		}
	}
	s.vals = vals
	return true
}

func (s *sqliteRows) Values() ([]any, error) { return s.vals, nil }

func (s *sqliteRows) Err() error {
	if s.err != nil {
		return s.err
	}
	return s.rows.Err()
}
