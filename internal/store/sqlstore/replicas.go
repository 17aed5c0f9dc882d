package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// RecordJTI implements store.Store.
func (d *DB) RecordJTI(ctx context.Context, key string, expires time.Time) error {
	res, err := d.db.ExecContext(ctx, `INSERT INTO service_auth_jtis (key, expires_at) VALUES (?, ?)
		ON CONFLICT (key) DO NOTHING`, key, ms(expires))
	if err != nil {
		return fmt.Errorf("record token id: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("token id recorded already: %w", store.ErrConflict)
	}
	return nil
}

// PruneJTIs implements store.Store.
func (d *DB) PruneJTIs(ctx context.Context, now time.Time) (int64, error) {
	res, err := d.db.ExecContext(ctx, `DELETE FROM service_auth_jtis WHERE expires_at < ?`, ms(now))
	if err != nil {
		return 0, fmt.Errorf("forget expired token ids: %w", err)
	}
	return res.RowsAffected()
}

// Counts implements store.Store: one GROUP BY over the runs (the index
// runs_by_state_lease covers state), one over the runners.
func (d *DB) Counts(ctx context.Context, onlineSince time.Time) (store.Counts, error) {
	var c store.Counts
	rows, err := d.db.QueryContext(ctx, `SELECT state, reason, COUNT(*) FROM runs GROUP BY state, reason ORDER BY state, reason`)
	if err != nil {
		return c, fmt.Errorf("count runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rc store.RunCount
		if err := rows.Scan(&rc.State, &rc.Reason, &rc.N); err != nil {
			return c, fmt.Errorf("count runs: %w", err)
		}
		c.Runs = append(c.Runs, rc)
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("count runs: %w", err)
	}
	var oldest sql.NullInt64
	if err := d.db.QueryRowContext(ctx, `SELECT MIN(created_at) FROM runs WHERE state = ?`, api.StateQueued).Scan(&oldest); err != nil {
		return c, fmt.Errorf("find the oldest queued run: %w", err)
	}
	c.OldestQueued = nullTime(oldest)
	if err := d.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN last_seen_at >= ? THEN 1 ELSE 0 END), 0)
		FROM runners WHERE status = ?`, ms(onlineSince), api.RunnerApproved).Scan(&c.RunnersApproved, &c.RunnersOnline); err != nil {
		return c, fmt.Errorf("count runners: %w", err)
	}
	return c, nil
}
