package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store"
)

// PutOutputs records an archive once (the same one again is no change,
// another is a conflict), lists its entries by path in pages, and its rows
// go with their run.
func testOutputs_RecordedOnceListedByPathAndDeletedWithTheRun(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	_, runs := seed(t, db, 1)
	id := runs[0].ID
	o := store.Outputs{RunID: id, Size: 4096, SHA256: "aa", Entries: 3, Bytes: 10, StoredAt: time.UnixMilli(1_700_000_000_000).UTC()}
	entries := []store.OutputEntry{
		{Path: "dist", Kind: "dir", Mode: 0o755},
		{Path: "coverage.out", Kind: "file", Size: 10, Mode: 0o644},
		{Path: "dist/link", Kind: "symlink", Mode: 0o777, Target: "../coverage.out"},
	}
	if _, err := db.RunOutputs(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("outputs before any: %v, want ErrNotFound", err)
	}
	if err := db.PutOutputs(ctx, o, entries); err != nil {
		t.Fatal(err)
	}
	if err := db.PutOutputs(ctx, o, entries); err != nil {
		t.Fatalf("the same archive again: %v", err)
	}
	other := o
	other.SHA256 = "bb"
	if err := db.PutOutputs(ctx, other, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("another archive: %v, want ErrConflict", err)
	}
	if err := db.PutOutputs(ctx, store.Outputs{RunID: 999, SHA256: "cc"}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("outputs of a missing run: %v, want ErrNotFound", err)
	}
	got, err := db.RunOutputs(ctx, id)
	if err != nil || got != o {
		t.Fatalf("RunOutputs = %+v, %v; want %+v", got, err, o)
	}
	page, err := db.OutputEntries(ctx, id, "", 2)
	if err != nil || len(page) != 2 || page[0].Path != "coverage.out" || page[1].Path != "dist" {
		t.Fatalf("first page %+v, %v", page, err)
	}
	page, err = db.OutputEntries(ctx, id, "dist", 2)
	if err != nil || len(page) != 1 || page[0] != entries[2] {
		t.Fatalf("second page %+v, %v", page, err)
	}
	// No run is deleted by the server yet; when one is, its outputs go too.
	raw := db.(rawSQL).SQL()
	for _, q := range []string{`DELETE FROM steps WHERE run_id = %d`, `DELETE FROM runs WHERE id = %d`} {
		q = fmt.Sprintf(q, id)
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var n int
	if err := raw.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM run_outputs) + (SELECT COUNT(*) FROM run_output_entries)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows left after the run was deleted: %d, %v", n, err)
	}
}
