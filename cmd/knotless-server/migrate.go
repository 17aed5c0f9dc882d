package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/store/migrate"
	"knotless.dev/knotless/internal/store/postgres"
)

// newMigrateCommand is `knotless-server migrate --to postgres://...`.
func newMigrateCommand() *cobra.Command {
	var dataDir, to string
	cmd := &cobra.Command{
		Use:   "migrate --to postgres://USER:PASSWORD@HOST:PORT/DB [--data DIR]",
		Short: "Copy the SQLite database of a data directory into a new PostgreSQL database",
		Long: `migrate copies DATA/knotless.db, every table and row, into a new, empty
PostgreSQL database (its schema is made first), in one transaction, and
checks each table's row count. Stop knotless-server first: migrate refuses
a data directory a server holds. Afterwards start the server (or several
replicas) with --database URL on the same data directory, which keeps the
logs, outputs, repositories and keys; DATA/knotless.db is left as it was.`,
		Example: `  knotless-server migrate --data /var/lib/knotless --to postgres://knotless:PASSWORD@db.internal:5432/knotless
  knotless-server --data /var/lib/knotless --database postgres://knotless:PASSWORD@db.internal:5432/knotless`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := envflag.Apply(cmd.Flags()); err != nil {
				return &usageError{err}
			}
			if !postgres.IsURL(to) {
				return usagef("--to %q: want a PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DB", postgres.Redact(to))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := server.CheckDataDir(dataDir); err != nil {
				return fmt.Errorf("%w: stop it before migrating", err)
			}
			path := filepath.Join(dataDir, server.DBFile)
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("no SQLite database to migrate: %w", err)
			}
			start := time.Now()
			out := cmd.OutOrStdout()
			tables, err := migrate.SQLiteToPostgres(cmd.Context(), path, to, func(t migrate.Table) {
				fmt.Fprintf(out, "%-20s %8d rows\n", t.Name, t.Rows)
			})
			if err != nil {
				return err
			}
			var rows int64
			for _, t := range tables {
				rows += t.Rows
			}
			fmt.Fprintf(out, "copied %d rows of %d tables from %s to %s in %s\nstart the server with: knotless-server --data %s --database URL\n",
				rows, len(tables), path, postgres.Redact(to), time.Since(start).Round(time.Millisecond), dataDir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data", server.DefaultDataDir, "data directory whose DATA/knotless.db is copied")
	f.StringVar(&to, "to", "", "PostgreSQL URL of a new, empty database (required)")
	envflag.Bind(f, "data", "to")
	return cmd
}
