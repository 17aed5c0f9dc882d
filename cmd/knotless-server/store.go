package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/postgres"
	"knotless.dev/knotless/internal/store/sqlite"
)

// openStore is where knotless-server chooses its storage, the one place
// that does: with database "" (no --database) SQLite in
// DATA/knotless.db, made with its directory (0700) if missing, for this
// one process; else the PostgreSQL database at the URL database, which
// several replicas sharing dataDir may use. Either is migrated to the
// current schema. name is how the "server ready" log line names it
// (without a password). The caller closes the store after the server.
func openStore(ctx context.Context, dataDir, database string) (st store.Store, name string, err error) {
	if database != "" {
		if !postgres.IsURL(database) {
			return nil, "", fmt.Errorf("--database %q: want a PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DB), or nothing for SQLite in DATA/%s",
				postgres.Redact(database), server.DBFile)
		}
		db, err := postgres.Open(ctx, database)
		if err != nil {
			return nil, "", err
		}
		return db, postgres.Redact(database), nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, "", fmt.Errorf("create data directory: %w", err)
	}
	db, err := sqlite.Open(ctx, filepath.Join(dataDir, server.DBFile))
	if err != nil {
		return nil, "", err
	}
	return db, "sqlite", nil
}
