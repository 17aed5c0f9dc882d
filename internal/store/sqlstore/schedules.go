package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"knotless.dev/knotless/internal/store"
)

// Scheduled runs (issue 38): the schedules table (migration 0015). Firing
// is in CreatePipeline (fireSchedule), in the pipeline's transaction.

const scheduleCols = `s.id, s.repo_id, a.handle || '/' || r.name, s.workflow, s.cron, s.time_zone, s.branch,
	s.next_at, s.last_at, s.last_pipeline_id, s.problem, s.paused, s.paused_by, s.paused_at, s.created_at`

const scheduleFrom = ` FROM schedules s JOIN repos r ON r.id = s.repo_id JOIN accounts a ON a.id = r.owner_id`

func scanSchedule(row interface{ Scan(...any) error }) (store.Schedule, error) {
	var s store.Schedule
	var next, created int64
	var last, lastPipeline, pausedAt sql.NullInt64
	err := row.Scan(&s.ID, &s.RepoID, &s.Repo, &s.Workflow, &s.Cron, &s.TimeZone, &s.Branch,
		&next, &last, &lastPipeline, &s.Problem, &s.Paused, &s.PausedBy, &pausedAt, &created)
	s.NextAt, s.CreatedAt = fromMS(next), fromMS(created)
	s.LastAt, s.LastPipelineID, s.PausedAt = nullTime(last), lastPipeline.Int64, nullTime(pausedAt)
	return s, err
}

func listSchedules(ctx context.Context, q querier, where string, args ...any) ([]store.Schedule, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+scheduleCols+scheduleFrom+` `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	defer rows.Close()
	var out []store.Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// SyncSchedules implements store.Store. It first takes the repository's
// rows (a no-op UPDATE) and then upserts the wanted keys in key order, so
// that two syncs racing on PostgreSQL queue on the same rows in the same
// order: the later one fails to serialize and runs again (DB.tx) instead
// of deadlocking, and an insert of a key the other added is never a
// unique violation (ON CONFLICT).
func (d *DB) SyncSchedules(ctx context.Context, repoID int64, want []store.NewSchedule) ([]store.Schedule, error) {
	now := ms(time.Now())
	keep := map[store.ScheduleKey]bool{}
	var add []store.NewSchedule
	for _, w := range want {
		if !keep[w.ScheduleKey] { // a duplicate counts once: the first one
			keep[w.ScheduleKey] = true
			add = append(add, w)
		}
	}
	slices.SortFunc(add, func(a, b store.NewSchedule) int {
		return cmp.Or(cmp.Compare(a.Workflow, b.Workflow), cmp.Compare(a.Cron, b.Cron),
			cmp.Compare(a.TimeZone, b.TimeZone), cmp.Compare(a.Branch, b.Branch))
	})
	var out []store.Schedule
	err := d.tx(ctx, func(tx querier) error {
		if _, err := tx.ExecContext(ctx, `UPDATE schedules SET problem = problem WHERE repo_id = ?`, repoID); err != nil {
			return fmt.Errorf("lock the schedules: %w", err)
		}
		for _, w := range add {
			if _, err := tx.ExecContext(ctx, `INSERT INTO schedules (repo_id, workflow, cron, time_zone, branch, next_at, problem, created_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (repo_id, workflow, cron, time_zone, branch) DO UPDATE SET problem = excluded.problem`,
				repoID, w.Workflow, w.Cron, w.TimeZone, w.Branch, ms(w.NextAt), w.Problem, now); err != nil {
				return fmt.Errorf("keep schedule %q of %s: %w", w.Cron, w.Workflow, err)
			}
		}
		have, err := listSchedules(ctx, tx, `WHERE s.repo_id = ? ORDER BY s.id`, repoID)
		if err != nil {
			return err
		}
		out = out[:0]
		for _, s := range have {
			if keep[s.ScheduleKey] {
				out = append(out, s)
				continue
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM schedules WHERE id = ?`, s.ID); err != nil {
				return fmt.Errorf("remove schedule %d: %w", s.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sync the schedules of repository %d: %w", repoID, err)
	}
	return out, nil
}

// Schedules implements store.Store.
func (d *DB) Schedules(ctx context.Context, repoID int64) ([]store.Schedule, error) {
	return listSchedules(ctx, d.db, `WHERE s.repo_id = ? ORDER BY s.id`, repoID)
}

// Schedule implements store.Store.
func (d *DB) Schedule(ctx context.Context, id int64) (store.Schedule, error) {
	return getSchedule(ctx, d.db, id)
}

func getSchedule(ctx context.Context, q querier, id int64) (store.Schedule, error) {
	s, err := scanSchedule(q.QueryRowContext(ctx, `SELECT `+scheduleCols+scheduleFrom+` WHERE s.id = ?`, id))
	if err != nil {
		return s, notFound(err, fmt.Sprintf("schedule %d", id))
	}
	return s, nil
}

// DueSchedules implements store.Store.
func (d *DB) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	if limit <= 0 {
		limit = noLimit
	}
	return listSchedules(ctx, d.db, `WHERE NOT s.paused AND s.next_at <= ? ORDER BY s.next_at, s.id LIMIT ?`, ms(now), limit)
}

// NextScheduleAt implements store.Store.
func (d *DB) NextScheduleAt(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullInt64
	if err := d.db.QueryRowContext(ctx, `SELECT MIN(next_at) FROM schedules WHERE NOT paused`).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("read the next due time of the schedules: %w", err)
	}
	if !at.Valid {
		return time.Time{}, false, nil
	}
	return fromMS(at.Int64), true, nil
}

// SkipSchedule implements store.Store.
func (d *DB) SkipSchedule(ctx context.Context, id int64, expected, next time.Time, problem string) (bool, error) {
	var moved bool
	err := d.tx(ctx, func(tx querier) error {
		res, err := tx.ExecContext(ctx, `UPDATE schedules SET next_at = ?, problem = ? WHERE id = ? AND next_at = ?`,
			ms(next), problem, id, ms(expected))
		if err != nil {
			return fmt.Errorf("skip a due time of schedule %d: %w", id, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if moved = n == 1; !moved {
			_, err = getSchedule(ctx, tx, id)
		}
		return err
	})
	return moved, err
}

// PauseSchedule implements store.Store.
func (d *DB) PauseSchedule(ctx context.Context, id int64, paused bool, by string, at, next time.Time) (store.Schedule, error) {
	var s store.Schedule
	err := d.tx(ctx, func(tx querier) error {
		var res sql.Result
		var err error
		if paused {
			// Pausing again keeps who paused it first, and when.
			res, err = tx.ExecContext(ctx, `UPDATE schedules SET paused = TRUE,
				paused_by = CASE WHEN paused THEN paused_by ELSE ? END,
				paused_at = CASE WHEN paused THEN paused_at ELSE ? END WHERE id = ?`, by, ms(at), id)
		} else {
			// Only a paused schedule's NextAt moves: resuming a running
			// one must not pass over its due time.
			res, err = tx.ExecContext(ctx, `UPDATE schedules SET paused = FALSE, paused_by = '', paused_at = NULL,
				next_at = CASE WHEN paused THEN ? ELSE next_at END WHERE id = ?`, ms(next), id)
		}
		if err != nil {
			return fmt.Errorf("pause or resume schedule %d: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return notFound(sql.ErrNoRows, fmt.Sprintf("schedule %d", id))
		}
		s, err = getSchedule(ctx, tx, id)
		return err
	})
	return s, err
}

// fireSchedule moves schedule f.ID's NextAt from f.Expected to f.Next (of
// repository repoID), first in CreatePipeline's transaction tx: ErrConflict
// when the schedule is paused, gone, or its NextAt is no longer Expected
// (another replica fired or skipped that time), which rolls back the whole
// pipeline. On PostgreSQL the UPDATE takes the row's lock: a second
// replica firing the same time waits for the first to end, then fails to
// serialize and runs again (DB.tx), and then finds NextAt moved.
func fireSchedule(ctx context.Context, tx querier, repoID int64, f *store.ScheduleFire) error {
	res, err := tx.ExecContext(ctx, `UPDATE schedules SET next_at = ?, last_at = ?, problem = ''
		WHERE id = ? AND repo_id = ? AND next_at = ? AND NOT paused`,
		ms(f.Next), ms(f.Due), f.ID, repoID, ms(f.Expected))
	if err != nil {
		return fmt.Errorf("fire schedule %d: %w", f.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fire schedule %d: %w", f.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("schedule %d: its time %s was fired or skipped already, or it is paused or gone: %w",
			f.ID, f.Expected.UTC().Format(time.RFC3339), store.ErrConflict)
	}
	return nil
}
