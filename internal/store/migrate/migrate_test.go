package migrate_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"knotless.dev/knotless/internal/store/migrate"
	"knotless.dev/knotless/internal/store/sqlite"
)

// Every table a fresh SQLite database has after all migrations is one
// migrate copies to PostgreSQL. Pins: run_needs (0011), the object
// store's and retention's tables (0013, 0014) and schedules (0015) added
// by migrations and never copied, so `knotless-server migrate` silently
// left their rows behind.
func TestTables_EveryTableOfTheSchemaIsCopied(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "knotless.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	have, err := migrate.SchemaTables(ctx, db.SQL())
	if err != nil {
		t.Fatal(err)
	}
	if len(have) < 10 {
		t.Fatalf("the schema lists only %d tables: %v", len(have), have)
	}
	for _, name := range have {
		if !slices.Contains(migrate.Tables, name) {
			t.Errorf("table %s of the SQLite schema is not in migrate.Tables: knotless-server migrate would leave its rows behind", name)
		}
	}
	for _, name := range migrate.Tables {
		if !slices.Contains(have, name) {
			t.Errorf("migrate.Tables names %s, which the schema does not have", name)
		}
	}
}
