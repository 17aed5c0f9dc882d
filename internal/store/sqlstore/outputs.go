package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"knotless.dev/knotless/internal/store"
)

// PutOutputs implements store.Store.
func (d *DB) PutOutputs(ctx context.Context, o store.Outputs, entries []store.OutputEntry) error {
	return d.tx(ctx, func(tx querier) error {
		var sum string
		err := tx.QueryRowContext(ctx, `SELECT sha256 FROM run_outputs WHERE run_id = ?`, o.RunID).Scan(&sum)
		switch {
		case err == nil && sum == o.SHA256:
			return nil
		case err == nil:
			return fmt.Errorf("run %d stored other outputs (sha256 %s): %w", o.RunID, sum, store.ErrConflict)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read outputs of run %d: %w", o.RunID, err)
		}
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, o.RunID).Scan(&one); err != nil {
			return notFound(err, fmt.Sprintf("run %d", o.RunID))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO run_outputs (run_id, size, sha256, entries, bytes, stored_at)
			VALUES (?, ?, ?, ?, ?, ?)`, o.RunID, o.Size, o.SHA256, o.Entries, o.Bytes, ms(o.StoredAt)); err != nil {
			return fmt.Errorf("record outputs of run %d: %w", o.RunID, err)
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO run_output_entries (run_id, path, kind, size, mode, target)
			VALUES (?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return fmt.Errorf("record outputs of run %d: %w", o.RunID, err)
		}
		defer stmt.Close()
		for _, e := range entries {
			if _, err := stmt.ExecContext(ctx, o.RunID, e.Path, e.Kind, e.Size, int64(e.Mode), e.Target); err != nil {
				if d.isUnique(err) {
					return fmt.Errorf("outputs of run %d list %s twice: %w", o.RunID, e.Path, store.ErrConflict)
				}
				return fmt.Errorf("record outputs of run %d: %w", o.RunID, err)
			}
		}
		return nil
	})
}

// RunOutputs implements store.Store.
func (d *DB) RunOutputs(ctx context.Context, runID int64) (store.Outputs, error) {
	o := store.Outputs{RunID: runID}
	var at int64
	err := d.db.QueryRowContext(ctx, `SELECT size, sha256, entries, bytes, stored_at FROM run_outputs WHERE run_id = ?`, runID).
		Scan(&o.Size, &o.SHA256, &o.Entries, &o.Bytes, &at)
	if err != nil {
		return o, notFound(err, fmt.Sprintf("outputs of run %d", runID))
	}
	o.StoredAt = fromMS(at)
	return o, nil
}

// OutputEntries implements store.Store.
func (d *DB) OutputEntries(ctx context.Context, runID int64, after string, limit int) ([]store.OutputEntry, error) {
	q := `SELECT path, kind, size, mode, target FROM run_output_entries WHERE run_id = ? AND path > ? ORDER BY path`
	args := []any{runID, after}
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list outputs of run %d: %w", runID, err)
	}
	defer rows.Close()
	var out []store.OutputEntry
	for rows.Next() {
		var e store.OutputEntry
		var mode int64
		if err := rows.Scan(&e.Path, &e.Kind, &e.Size, &mode, &e.Target); err != nil {
			return nil, fmt.Errorf("list outputs of run %d: %w", runID, err)
		}
		e.Mode = uint32(mode)
		out = append(out, e)
	}
	return out, rows.Err()
}
