package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// What a run's end does to the other runs of its pipeline, in the
// transaction that ends it (afterEnd): its next attempt (retry:), the
// runs that need it (needs:), its matrix siblings (fail-fast). Every path
// that ends a run calls afterEnd: CompleteRun, CancelRun, ExpireLeases,
// RemoveRunner, supersede and CreatePipeline (runs created ended).

// waitsForNeeds is true (SQL) for a run of table alias t that needs a run
// that has not succeeded (yet).
func waitsForNeeds(t string) string {
	return `EXISTS (SELECT 1 FROM run_needs n JOIN runs o ON o.id = n.need_id WHERE n.run_id = ` + t + `.id
		AND o.state <> '` + api.StateSucceeded + `')`
}

// waitsForEnv is true (SQL, one ? for now in ms) for a retry of table
// alias t whose previous attempt's environment is not known gone by now.
func waitsForEnv(t string) string {
	return `(` + t + `.retry_of IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.id = ` + t + `.retry_of
		AND p.env_gone_at IS NOT NULL AND p.env_gone_at <= ?))`
}

// envDeadline is when the environment of run r, which ended at now
// without its runner saying its environment is gone, is gone all the
// same: its timeout past its start (every executor stops a run there,
// inside the environment), plus store.EnvGrace.
func envDeadline(r store.Run, now time.Time) time.Time {
	start := now
	switch {
	case r.StartedAt != nil:
		start = *r.StartedAt
	case r.ClaimedAt != nil:
		start = *r.ClaimedAt
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = time.Hour // a run from before timeouts were stored: the default
	}
	return start.Add(timeout + store.EnvGrace)
}

// afterEnd does what run id's end does to the other runs (see the top of
// this file) and returns them in their new state.
func afterEnd(ctx context.Context, tx querier, id int64, now time.Time) ([]store.Run, error) {
	r, err := getRun(ctx, tx, id)
	if err != nil || !api.IsFinal(r.State) || r.RetriedBy != 0 {
		return nil, err
	}
	if r.State == api.StateErrored && r.Attempt <= r.RetryMax && slices.Contains(r.RetryWhen, r.Reason) {
		next, err := retry(ctx, tx, r, now)
		if err != nil {
			return nil, err
		}
		return []store.Run{next}, nil
	}
	if r.State == api.StateSucceeded {
		return nil, nil
	}
	out, err := skipDependents(ctx, tx, r, now)
	if err != nil {
		return nil, err
	}
	if r.FailFast && len(r.Matrix) > 0 && (r.State == api.StateFailed || r.State == api.StateErrored) {
		siblings, err := failFast(ctx, tx, r, now)
		if err != nil {
			return nil, err
		}
		out = append(out, siblings...)
	}
	return out, nil
}

// retry creates run r's next attempt: a queued copy with Attempt + 1 and
// RetryOf r, which needs what r needed and is needed instead of r.
func retry(ctx context.Context, tx querier, r store.Run, now time.Time) (store.Run, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO runs (pipeline_id, repo_id, workflow, workflow_path, source, secrets,
			runners, state, created_at, concurrency_group, matrix, fail_fast, attempt, retry_of, retry_max, retry_when, timeout_ms, services)
		SELECT pipeline_id, repo_id, workflow, workflow_path, source, secrets, runners, ?, ?, concurrency_group, matrix,
			fail_fast, attempt + 1, id, retry_max, retry_when, timeout_ms, services FROM runs WHERE id = ? RETURNING id`,
		api.StateQueued, ms(now), r.ID).Scan(&id)
	if err != nil {
		return store.Run{}, fmt.Errorf("create attempt %d of run %d: %w", r.Attempt+1, r.ID, err)
	}
	for _, q := range []string{
		`UPDATE runs SET retried_by = ? WHERE id = ?`,
		`INSERT INTO run_needs (run_id, need_id, name) SELECT ?, need_id, name FROM run_needs WHERE run_id = ?`,
		`UPDATE run_needs SET need_id = ? WHERE need_id = ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, id, r.ID); err != nil {
			return store.Run{}, fmt.Errorf("link attempt %d (run %d) to run %d: %w", r.Attempt+1, id, r.ID, err)
		}
	}
	return getRun(ctx, tx, id)
}

// skipDependents ends skipped (need-failed) the queued runs that need
// run r, which ended without succeeding for good, and, in turn, those
// that need them.
func skipDependents(ctx context.Context, tx querier, r store.Run, now time.Time) ([]store.Run, error) {
	deps, err := listRuns(ctx, tx, `WHERE r.state = ? AND r.id IN (SELECT run_id FROM run_needs WHERE need_id = ?) ORDER BY r.id`,
		api.StateQueued, r.ID)
	if err != nil {
		return nil, err
	}
	how := r.State
	if r.Reason != "" && r.Reason != r.State {
		how += " (" + r.Reason + ")"
	}
	var out []store.Run
	for _, dep := range deps {
		msg := fmt.Sprintf("needs run %d (%s), which ended %s", r.ID, r.Workflow, how)
		ended, err := endQueued(ctx, tx, dep.ID, api.StateSkipped, api.ReasonNeedFailed, msg, now)
		if err != nil {
			return nil, err
		}
		out = append(out, ended)
		more, err := skipDependents(ctx, tx, ended, now)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	return out, nil
}

// failFast cancels the runs of r's matrix (its pipeline's runs of the
// same workflow file) that have not ended: queued ones end at once,
// claimed and running ones get a cancel request whose end reads
// cancelled (fail-fast).
func failFast(ctx context.Context, tx querier, r store.Run, now time.Time) ([]store.Run, error) {
	sibs, err := listRuns(ctx, tx, `WHERE r.pipeline_id = ? AND r.workflow_path = ? AND r.id <> ? AND r.state NOT IN `+runFinal+` ORDER BY r.id`,
		r.PipelineID, r.WorkflowPath, r.ID)
	if err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("cancelled: run %d (%s) of the same matrix ended %s, and the matrix is fail-fast", r.ID, r.Workflow, r.State)
	var out []store.Run
	for _, s := range sibs {
		if s.State == api.StateQueued {
			ended, err := endQueued(ctx, tx, s.ID, api.StateCancelled, api.ReasonFailFast, msg, now)
			if err != nil {
				return nil, err
			}
			more, err := skipDependents(ctx, tx, ended, now)
			if err != nil {
				return nil, err
			}
			out = append(append(out, ended), more...)
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET cancel_requested = TRUE, cancel_reason = ?, cancel_message = ? WHERE id = ?`,
			api.ReasonFailFast, msg, s.ID); err != nil {
			return nil, fmt.Errorf("cancel run %d (fail-fast): %w", s.ID, err)
		}
		got, err := getRun(ctx, tx, s.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, got)
	}
	return out, nil
}

// endQueued ends queued run id with state, reason and msg at now, its
// steps with it; it never ran, so its environment is gone too.
func endQueued(ctx context.Context, tx querier, id int64, state, reason, msg string, now time.Time) (store.Run, error) {
	if _, err := tx.ExecContext(ctx, `UPDATE runs SET state = ?, reason = ?, message = ?, finished_at = ?, env_gone_at = ?
		WHERE id = ? AND state = ?`, state, reason, msg, ms(now), ms(now), id, api.StateQueued); err != nil {
		return store.Run{}, fmt.Errorf("end run %d %s: %w", id, state, err)
	}
	if err := finishSteps(ctx, tx, id, state, reason, now); err != nil {
		return store.Run{}, err
	}
	return getRun(ctx, tx, id)
}

// insertNeeds records the needs of the runs of one new pipeline (ids in
// the order of runs).
func insertNeeds(ctx context.Context, tx querier, runs []store.NewRun, ids []int64) error {
	for i, r := range runs {
		for _, n := range r.Needs {
			if n.Index < 0 || n.Index >= len(ids) || n.Index == i {
				return fmt.Errorf("run %d of the pipeline needs run %d of it: no such other run", i, n.Index)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO run_needs (run_id, need_id, name) VALUES (?, ?, ?)`,
				ids[i], ids[n.Index], n.Name); err != nil {
				return fmt.Errorf("record that run %d needs run %d: %w", ids[i], ids[n.Index], err)
			}
		}
	}
	return nil
}

// Needs implements store.Store.
func (d *DB) Needs(ctx context.Context, runIDs []int64) (map[int64][]store.Need, error) {
	out := map[int64][]store.Need{}
	for len(runIDs) > 0 {
		batch := runIDs[:min(len(runIDs), 500)]
		runIDs = runIDs[len(batch):]
		args := make([]any, len(batch))
		for i, id := range batch {
			args[i] = id
		}
		rows, err := d.db.QueryContext(ctx, `SELECT run_id, need_id, name FROM run_needs WHERE run_id IN (`+
			placeholders(len(batch))+`) ORDER BY run_id, need_id`, args...)
		if err != nil {
			return nil, fmt.Errorf("read needs: %w", err)
		}
		for rows.Next() {
			var run int64
			var n store.Need
			if err := rows.Scan(&run, &n.Run, &n.Name); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read needs: %w", err)
			}
			out[run] = append(out[run], n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EnvironmentsGone implements store.Store.
func (d *DB) EnvironmentsGone(ctx context.Context, runnerID, runID int64, keep []int64, now time.Time) ([]store.Run, error) {
	where, args := `runner_id = ? AND state IN `+runFinal+` AND (env_gone_at IS NULL OR env_gone_at > ?)`, []any{runnerID, ms(now)}
	if runID != 0 {
		where += ` AND id = ?`
		args = append(args, runID)
	}
	if len(keep) > 0 {
		where += ` AND id NOT IN (` + placeholders(len(keep)) + `)`
		for _, k := range keep {
			args = append(args, k)
		}
	}
	var out []store.Run
	err := d.tx(ctx, func(tx querier) error {
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET env_gone_at = ? WHERE `+where, append([]any{ms(now)}, args...)...); err != nil {
			return fmt.Errorf("record the environments of runner %d gone: %w", runnerID, err)
		}
		var err error
		out, err = listRuns(ctx, tx, `WHERE r.state = ? AND NOT `+waitsForEnv("r")+` AND r.retry_of IN
			(SELECT id FROM runs WHERE runner_id = ?) ORDER BY r.id`, api.StateQueued, ms(now), runnerID)
		return err
	})
	return out, err
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func jsonMatrix(m []api.MatrixValue) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func parseMatrix(s string) []api.MatrixValue {
	var m []api.MatrixValue
	if s != "" {
		_ = json.Unmarshal([]byte(s), &m)
	}
	return m
}

func jsonMap(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func parseMap(s string) map[string]string {
	var m map[string]string
	if s != "" {
		_ = json.Unmarshal([]byte(s), &m)
	}
	return m
}
