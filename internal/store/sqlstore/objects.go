package sqlstore

import (
	"context"
	"fmt"
	"time"

	"knotless.dev/knotless/internal/store"
)

var _ store.Objects = (*DB)(nil)

// RunsToMove implements store.Objects. Runs whose bytes retention
// removed (run_bytes.expired_at set) are not listed: there is nothing
// left to move.
func (d *DB) RunsToMove(ctx context.Context, after int64, from, to time.Time, limit int) ([]int64, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT r.id FROM runs r LEFT JOIN moved_runs m ON m.run_id = r.id
		WHERE r.id > ? AND r.finished_at IS NOT NULL AND r.finished_at >= ? AND r.finished_at < ?
		AND (m.run_id IS NULL OR m.cleaned = FALSE)
		AND NOT EXISTS (SELECT 1 FROM run_bytes b WHERE b.run_id = r.id AND b.expired_at IS NOT NULL)
		ORDER BY r.id LIMIT ?`, after, ms(from), ms(to), limit)
	if err != nil {
		return nil, fmt.Errorf("list runs to move: %w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("list runs to move: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// RecordMoved implements store.Objects.
func (d *DB) RecordMoved(ctx context.Context, m store.MovedRun) error {
	return d.tx(ctx, func(tx querier) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, m.RunID).Scan(&one); err != nil {
			return notFound(err, fmt.Sprintf("run %d", m.RunID))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO moved_runs (run_id, outputs, moved_at, cleaned) VALUES (?, ?, ?, FALSE)`,
			m.RunID, m.Outputs, ms(m.MovedAt)); err != nil {
			if d.isUnique(err) {
				return fmt.Errorf("run %d is recorded moved already: %w", m.RunID, store.ErrConflict)
			}
			return fmt.Errorf("record run %d moved: %w", m.RunID, err)
		}
		for _, l := range m.Logs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO moved_logs (run_id, step, size, times_size) VALUES (?, ?, ?, ?)`,
				m.RunID, l.Step, l.Size, l.TimesSize); err != nil {
				return fmt.Errorf("record log of run %d step %d moved: %w", m.RunID, l.Step, err)
			}
		}
		return nil
	})
}

// MovedRun implements store.Objects.
func (d *DB) MovedRun(ctx context.Context, run int64) (store.MovedRun, error) {
	m := store.MovedRun{RunID: run}
	var at int64
	err := d.db.QueryRowContext(ctx, `SELECT outputs, moved_at, cleaned FROM moved_runs WHERE run_id = ?`, run).
		Scan(&m.Outputs, &at, &m.Cleaned)
	if err != nil {
		return m, notFound(err, fmt.Sprintf("moved run %d", run))
	}
	m.MovedAt = fromMS(at)
	rows, err := d.db.QueryContext(ctx, `SELECT step, size, times_size FROM moved_logs WHERE run_id = ? ORDER BY step`, run)
	if err != nil {
		return m, fmt.Errorf("read moved logs of run %d: %w", run, err)
	}
	defer rows.Close()
	for rows.Next() {
		var l store.MovedLog
		if err := rows.Scan(&l.Step, &l.Size, &l.TimesSize); err != nil {
			return m, fmt.Errorf("read moved logs of run %d: %w", run, err)
		}
		m.Logs = append(m.Logs, l)
	}
	return m, rows.Err()
}

// MovedLog implements store.Objects.
func (d *DB) MovedLog(ctx context.Context, run int64, step int) (store.MovedLog, error) {
	l := store.MovedLog{Step: step}
	err := d.db.QueryRowContext(ctx, `SELECT size, times_size FROM moved_logs WHERE run_id = ? AND step = ?`, run, step).
		Scan(&l.Size, &l.TimesSize)
	if err != nil {
		return l, notFound(err, fmt.Sprintf("moved log of run %d step %d", run, step))
	}
	return l, nil
}

// MarkCleaned implements store.Objects.
func (d *DB) MarkCleaned(ctx context.Context, run int64) error {
	if _, err := d.db.ExecContext(ctx, `UPDATE moved_runs SET cleaned = TRUE WHERE run_id = ?`, run); err != nil {
		return fmt.Errorf("record run %d's local copies removed: %w", run, err)
	}
	return nil
}

// ForgetMoved implements store.Objects.
func (d *DB) ForgetMoved(ctx context.Context, run int64) error {
	return d.tx(ctx, func(tx querier) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM moved_logs WHERE run_id = ?`, run); err != nil {
			return fmt.Errorf("forget run %d's moved logs: %w", run, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM moved_runs WHERE run_id = ?`, run); err != nil {
			return fmt.Errorf("forget run %d's move: %w", run, err)
		}
		return nil
	})
}
