package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"knotless.dev/knotless/internal/store"
)

// Retention and usage (issue 36): repo_retention, run_bytes and
// repo_cache_usage (migration 0014).

// SetRepoRetention implements store.Store.
func (d *DB) SetRepoRetention(ctx context.Context, r store.RepoRetention) error {
	return d.tx(ctx, func(tx querier) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM repos WHERE id = ?`, r.RepoID).Scan(&one); err != nil {
			return notFound(err, fmt.Sprintf("repository %d", r.RepoID))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO repo_retention (repo_id, keep_logs_days, keep_pipelines, set_by, set_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (repo_id) DO UPDATE SET keep_logs_days = excluded.keep_logs_days,
			keep_pipelines = excluded.keep_pipelines, set_by = excluded.set_by, set_at = excluded.set_at`,
			r.RepoID, intArg(r.KeepLogsDays), intArg(r.KeepPipelines), r.SetBy, ms(r.SetAt))
		if err != nil {
			return fmt.Errorf("record the retention of repository %d: %w", r.RepoID, err)
		}
		return nil
	})
}

// RepoRetention implements store.Store.
func (d *DB) RepoRetention(ctx context.Context, repoID int64) (store.RepoRetention, error) {
	out := store.RepoRetention{RepoID: repoID}
	var days, pipes sql.NullInt64
	var at int64
	err := d.db.QueryRowContext(ctx, `SELECT keep_logs_days, keep_pipelines, set_by, set_at FROM repo_retention WHERE repo_id = ?`,
		repoID).Scan(&days, &pipes, &out.SetBy, &at)
	if err == sql.ErrNoRows {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read the retention of repository %d: %w", repoID, err)
	}
	out.KeepLogsDays, out.KeepPipelines, out.SetAt = nullInt(days), nullInt(pipes), fromMS(at)
	return out, nil
}

// UnmeasuredRuns implements store.Store, along runs_by_finished.
func (d *DB) UnmeasuredRuns(ctx context.Context, from, before time.Time, limit int) ([]int64, error) {
	lo := int64(0)
	if !from.IsZero() {
		lo = ms(from)
	}
	return d.ids(ctx, "list runs to measure", `SELECT r.id FROM runs r
		WHERE r.finished_at IS NOT NULL AND r.finished_at >= ? AND r.finished_at < ?
		AND NOT EXISTS (SELECT 1 FROM run_bytes b WHERE b.run_id = r.id)
		ORDER BY r.finished_at, r.id LIMIT ?`, lo, ms(before), limit)
}

// RecordRunBytes implements store.Store.
func (d *DB) RecordRunBytes(ctx context.Context, b store.RunBytes) error {
	return d.tx(ctx, func(tx querier) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, b.RunID).Scan(&one); err != nil {
			return notFound(err, fmt.Sprintf("run %d", b.RunID))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO run_bytes (run_id, logs_bytes, logs, outputs_bytes, measured_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET logs_bytes = excluded.logs_bytes,
			logs = excluded.logs, outputs_bytes = excluded.outputs_bytes, measured_at = excluded.measured_at`,
			b.RunID, b.LogsBytes, b.Logs, b.OutputsBytes, ms(b.MeasuredAt))
		if err != nil {
			return fmt.Errorf("record the bytes of run %d: %w", b.RunID, err)
		}
		return nil
	})
}

// dayMS is a day in milliseconds, the unit of the stored times.
const dayMS = 24 * 60 * 60 * 1000

// ExpiryCandidates implements store.Store. A run goes when every rule
// set for its repository (its own, else the server's) lets it go: it
// ended more than the days ago, and more pipelines of its ref than kept
// are newer than its own (pipelines_by_repo_ref answers the count).
func (d *DB) ExpiryCandidates(ctx context.Context, q store.ExpiryQuery) ([]int64, error) {
	if q.Limit <= 0 {
		return nil, fmt.Errorf("list runs to expire: limit %d, want > 0", q.Limit)
	}
	days, pipes := q.Server.KeepLogsDays, q.Server.KeepPipelines
	if !q.Server.Expires() {
		// Only repositories' own rules can expire anything: most often
		// none, answered without looking at any run.
		var one int
		err := d.db.QueryRowContext(ctx, `SELECT 1 FROM repo_retention WHERE keep_logs_days > 0 OR keep_pipelines > 0 LIMIT 1`).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list runs to expire: %w", err)
		}
	}
	return d.ids(ctx, "list runs to expire", `SELECT r.id FROM run_bytes b
		JOIN runs r ON r.id = b.run_id
		JOIN pipelines p ON p.id = r.pipeline_id
		LEFT JOIN repo_retention rr ON rr.repo_id = r.repo_id
		WHERE b.expired_at IS NULL
		AND r.finished_at IS NOT NULL AND r.finished_at < ?
		AND r.state NOT IN ('queued', 'claimed', 'running')
		AND (COALESCE(rr.keep_logs_days, ?) > 0 OR COALESCE(rr.keep_pipelines, ?) > 0)
		AND (COALESCE(rr.keep_logs_days, ?) <= 0
			OR r.finished_at < CAST(? AS BIGINT) - CAST(COALESCE(rr.keep_logs_days, ?) AS BIGINT) * `+fmt.Sprint(dayMS)+`)
		AND (COALESCE(rr.keep_pipelines, ?) <= 0
			OR (SELECT COUNT(*) FROM pipelines p2 WHERE p2.repo_id = p.repo_id AND p2.ref = p.ref AND p2.id > p.id)
				>= COALESCE(rr.keep_pipelines, ?))
		ORDER BY r.finished_at, r.id LIMIT ?`,
		ms(q.EndedBefore), days, pipes, days, ms(q.Now), days, pipes, pipes, q.Limit)
}

// ids runs a query of one id column.
func (d *DB) ids(ctx context.Context, what, query string, args ...any) ([]int64, error) {
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// MarkRunExpired implements store.Store.
func (d *DB) MarkRunExpired(ctx context.Context, runID int64, at time.Time) (bool, error) {
	var marked bool
	err := d.tx(ctx, func(tx querier) error {
		res, err := tx.ExecContext(ctx, `UPDATE run_bytes SET expired_at = ? WHERE run_id = ? AND expired_at IS NULL`, ms(at), runID)
		if err != nil {
			return fmt.Errorf("record run %d expired: %w", runID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("record run %d expired: %w", runID, err)
		}
		marked = n == 1
		if marked {
			return nil
		}
		var one int
		return notFoundOr(tx.QueryRowContext(ctx, `SELECT 1 FROM run_bytes WHERE run_id = ?`, runID).Scan(&one),
			fmt.Sprintf("measured bytes of run %d", runID))
	})
	return marked, err
}

// notFoundOr is notFound for a failed err, nil for none.
func notFoundOr(err error, what string) error {
	if err == nil {
		return nil
	}
	return notFound(err, what)
}

// RunExpiredAt implements store.Store.
func (d *DB) RunExpiredAt(ctx context.Context, runID int64) (*time.Time, error) {
	var at sql.NullInt64
	err := d.db.QueryRowContext(ctx, `SELECT expired_at FROM run_bytes WHERE run_id = ?`, runID).Scan(&at)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the expiry of run %d: %w", runID, err)
	}
	return nullTime(at), nil
}

// PutCacheUsage implements store.Store.
func (d *DB) PutCacheUsage(ctx context.Context, u store.CacheUsage) error {
	_, err := d.db.ExecContext(ctx, `INSERT INTO repo_cache_usage (repo_id, store, entries, bytes, reported_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (repo_id, store) DO UPDATE SET entries = excluded.entries,
		bytes = excluded.bytes, reported_at = excluded.reported_at
		WHERE repo_cache_usage.reported_at <= excluded.reported_at`,
		u.RepoID, u.Store, u.Entries, u.Bytes, ms(u.ReportedAt))
	if err != nil {
		return fmt.Errorf("record the cache usage of repository %d: %w", u.RepoID, err)
	}
	return nil
}

// RepoUsage implements store.Store.
func (d *DB) RepoUsage(ctx context.Context, repoID int64, unmeasuredMax int) (store.RepoUsage, error) {
	var u store.RepoUsage
	var last sql.NullInt64
	err := d.db.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN b.expired_at IS NULL THEN b.logs_bytes ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN b.expired_at IS NULL THEN b.logs ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN b.expired_at IS NULL THEN 0 ELSE 1 END), 0),
		COALESCE(SUM(CASE WHEN b.expired_at IS NULL THEN 0 ELSE b.logs_bytes + b.outputs_bytes END), 0),
		MAX(b.expired_at)
		FROM run_bytes b JOIN runs r ON r.id = b.run_id WHERE r.repo_id = ?`, repoID).
		Scan(&u.LogsBytes, &u.Logs, &u.ExpiredRuns, &u.ExpiredBytes, &last)
	if err != nil {
		return u, fmt.Errorf("sum the logs of repository %d: %w", repoID, err)
	}
	u.LastExpiredAt = nullTime(last)
	err = d.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(o.size), 0), COUNT(*) FROM run_outputs o
		JOIN runs r ON r.id = o.run_id LEFT JOIN run_bytes b ON b.run_id = o.run_id
		WHERE r.repo_id = ? AND b.expired_at IS NULL`, repoID).Scan(&u.OutputsBytes, &u.Outputs)
	if err != nil {
		return u, fmt.Errorf("sum the outputs of repository %d: %w", repoID, err)
	}
	ids, err := d.ids(ctx, "list unmeasured runs", `SELECT r.id FROM runs r WHERE r.repo_id = ? AND r.state <> 'queued'
		AND NOT EXISTS (SELECT 1 FROM run_bytes b WHERE b.run_id = r.id) ORDER BY r.id DESC LIMIT ?`, repoID, unmeasuredMax+1)
	if err != nil {
		return u, err
	}
	if len(ids) > unmeasuredMax {
		ids, u.UnmeasuredMore = ids[:unmeasuredMax], true
	}
	u.Unmeasured = ids
	u.Caches, err = d.cacheUsage(ctx, repoID)
	return u, err
}

func (d *DB) cacheUsage(ctx context.Context, repoID int64) ([]store.CacheUsage, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT store, entries, bytes, reported_at FROM repo_cache_usage
		WHERE repo_id = ? ORDER BY store`, repoID)
	if err != nil {
		return nil, fmt.Errorf("read the cache usage of repository %d: %w", repoID, err)
	}
	defer rows.Close()
	var out []store.CacheUsage
	for rows.Next() {
		c := store.CacheUsage{RepoID: repoID}
		var at int64
		if err := rows.Scan(&c.Store, &c.Entries, &c.Bytes, &at); err != nil {
			return nil, fmt.Errorf("read the cache usage of repository %d: %w", repoID, err)
		}
		c.ReportedAt = fromMS(at)
		out = append(out, c)
	}
	return out, rows.Err()
}
