package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// CreatePipeline implements store.Store.
func (d *DB) CreatePipeline(ctx context.Context, np store.NewPipeline) (store.Pipeline, []store.Run, error) {
	if np.CreatedAt.IsZero() {
		np.CreatedAt = time.Now()
	}
	now := ms(np.CreatedAt)
	var pid int64
	var ids []int64
	err := d.tx(ctx, func(tx querier) error {
		ids = make([]int64, 0, len(np.Runs)) // empty again when the transaction is retried
		if np.Schedule != nil {
			// First: a replica that lost the race takes no pipeline id
			// (a gap in the numbers).
			if err := fireSchedule(ctx, tx, np.RepoID, np.Schedule); err != nil {
				return err
			}
		}
		err := tx.QueryRowContext(ctx,
			`INSERT INTO pipelines (repo_id, ref, sha, event, before_sha, actor, created_at, notes, rerun_of) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			np.RepoID, np.Ref, np.SHA, np.Event, np.BeforeSHA, np.Actor, now, notesArg(np.Notes), np.RerunOf).Scan(&pid)
		if err != nil {
			return fmt.Errorf("insert pipeline: %w", err)
		}
		if np.Schedule != nil {
			if _, err := tx.ExecContext(ctx, `UPDATE schedules SET last_pipeline_id = ? WHERE id = ?`, pid, np.Schedule.ID); err != nil {
				return fmt.Errorf("record schedule %d's pipeline: %w", np.Schedule.ID, err)
			}
		}
		for _, r := range np.Runs {
			var finished any
			if api.IsFinal(r.State) {
				finished = now
			}
			group := r.ConcurrencyGroup
			if api.IsFinal(r.State) {
				group = "" // it never waits, and nobody waits for it
			}
			var id int64
			var gone any
			if api.IsFinal(r.State) {
				gone = now // it never ran
			}
			err := tx.QueryRowContext(ctx, `INSERT INTO runs (pipeline_id, repo_id, workflow, workflow_path,
				source, secrets, runners, state, reason, message, created_at, finished_at, concurrency_group,
				matrix, fail_fast, retry_max, retry_when, timeout_ms, env_gone_at, services)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
				pid, np.RepoID, r.Workflow, r.WorkflowPath, r.Source, jsonList(r.Secrets), jsonList(r.Runners),
				r.State, r.Reason, r.Message, now, finished, group,
				jsonMatrix(r.Matrix), r.FailFast, r.RetryMax, jsonList(r.RetryWhen), r.Timeout.Milliseconds(), gone, r.Services).Scan(&id)
			if err != nil {
				return fmt.Errorf("insert run of %s: %w", r.WorkflowPath, err)
			}
			ids = append(ids, id)
			if group != "" && r.CancelInProgress {
				if err := supersede(ctx, tx, np.RepoID, group, id, np.CreatedAt); err != nil {
					return err
				}
			}
			for _, s := range r.Steps {
				if _, err := tx.ExecContext(ctx, `INSERT INTO steps (run_id, idx, name, state, exit_code, reason, updated_at)
					VALUES (?, ?, ?, ?, ?, ?, ?)`, id, s.Index, s.Name, s.State, intArg(s.ExitCode), s.Reason, now); err != nil {
					return fmt.Errorf("insert step %d of run %d: %w", s.Index, id, err)
				}
			}
			if api.IsFinal(r.State) {
				if err := finishSteps(ctx, tx, id, r.State, r.Reason, np.CreatedAt); err != nil {
					return err
				}
			}
		}
		if err := insertNeeds(ctx, tx, np.Runs, ids); err != nil {
			return err
		}
		for i, r := range np.Runs {
			if api.IsFinal(r.State) {
				// The runs that need it never start: skipped, in this
				// transaction (they are among the runs returned).
				if _, err := afterEnd(ctx, tx, ids[i], np.CreatedAt); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return store.Pipeline{}, nil, err
	}
	p, err := d.Pipeline(ctx, pid)
	if err != nil {
		return p, nil, err
	}
	runs := make([]store.Run, 0, len(ids))
	for _, id := range ids {
		r, err := d.Run(ctx, id)
		if err != nil {
			return p, nil, err
		}
		runs = append(runs, r)
	}
	return p, runs, nil
}

// Pipeline implements store.Store.
func (d *DB) Pipeline(ctx context.Context, id int64) (store.Pipeline, error) {
	p, err := scanPipeline(d.db.QueryRowContext(ctx, `SELECT `+pipelineCols+pipelineFrom+` WHERE p.id = ?`, id))
	if err != nil {
		return p, notFound(err, fmt.Sprintf("pipeline %d", id))
	}
	return p, nil
}

const pipelineCols = `p.id, p.repo_id, a.handle || '/' || r.name, p.ref, p.sha, p.event, p.before_sha, p.actor, p.created_at,
	p.notes, p.rerun_of`

const pipelineFrom = ` FROM pipelines p JOIN repos r ON r.id = p.repo_id JOIN accounts a ON a.id = r.owner_id`

func scanPipeline(row interface{ Scan(...any) error }) (store.Pipeline, error) {
	var p store.Pipeline
	var created int64
	var notes string
	err := row.Scan(&p.ID, &p.RepoID, &p.Repo, &p.Ref, &p.SHA, &p.Event, &p.BeforeSHA, &p.Actor, &created, &notes, &p.RerunOf)
	p.CreatedAt, p.Notes = fromMS(created), parseList(notes)
	return p, err
}

// notesArg stores notes: empty for none, else a JSON list.
func notesArg(notes []string) string {
	if len(notes) == 0 {
		return ""
	}
	return jsonList(notes)
}

const runCols = `r.id, r.pipeline_id, r.repo_id, repos.owner_id, a.handle || '/' || repos.name,
	p.ref, p.sha, p.event, p.before_sha, p.actor, p.notes, p.rerun_of, r.workflow, r.workflow_path, r.secrets, r.runners, r.state, r.reason,
	r.message, r.exit_code, r.runner_id, r.runner_name, r.cancel_requested, r.created_at,
	r.claimed_at, r.started_at, r.finished_at, r.lease_expires, r.concurrency_group, r.superseded_by,
	r.matrix, r.fail_fast, r.attempt, r.retry_of, r.retried_by, r.retry_max, r.retry_when, r.timeout_ms, r.env_gone_at, r.exports, r.services`

const runFrom = ` FROM runs r JOIN pipelines p ON p.id = r.pipeline_id
	JOIN repos ON repos.id = r.repo_id JOIN accounts a ON a.id = repos.owner_id`

func scanRun(row interface{ Scan(...any) error }) (store.Run, error) {
	var r store.Run
	var secrets, runners, notes, matrix, retryWhen, exports string
	var exit, runnerID, claimed, started, finished, lease, superseded, retryOf, retriedBy, envGone sql.NullInt64
	var created, timeout int64
	err := row.Scan(&r.ID, &r.PipelineID, &r.RepoID, &r.RepoOwnerID, &r.Repo, &r.Ref, &r.SHA, &r.Event, &r.BeforeSHA, &r.Actor,
		&notes, &r.RerunOf, &r.Workflow, &r.WorkflowPath, &secrets, &runners, &r.State, &r.Reason, &r.Message, &exit,
		&runnerID, &r.RunnerName, &r.CancelRequested, &created, &claimed, &started, &finished, &lease,
		&r.ConcurrencyGroup, &superseded,
		&matrix, &r.FailFast, &r.Attempt, &retryOf, &retriedBy, &r.RetryMax, &retryWhen, &timeout, &envGone, &exports, &r.Services)
	if err != nil {
		return r, err
	}
	r.Matrix, r.Exports = parseMatrix(matrix), parseMap(exports)
	r.RetryOf, r.RetriedBy, r.RetryWhen = retryOf.Int64, retriedBy.Int64, parseList(retryWhen)
	r.Timeout, r.EnvGoneAt = time.Duration(timeout)*time.Millisecond, nullTime(envGone)
	r.SupersededBy = superseded.Int64
	r.Secrets, r.Runners, r.Notes = parseList(secrets), parseList(runners), parseList(notes)
	r.ExitCode = nullInt(exit)
	r.RunnerID = runnerID.Int64
	r.CreatedAt = fromMS(created)
	r.ClaimedAt, r.StartedAt, r.FinishedAt, r.LeaseExpires = nullTime(claimed), nullTime(started), nullTime(finished), nullTime(lease)
	return r, nil
}

func getRun(ctx context.Context, q querier, id int64) (store.Run, error) {
	r, err := scanRun(q.QueryRowContext(ctx, `SELECT `+runCols+runFrom+` WHERE r.id = ?`, id))
	if err != nil {
		return r, notFound(err, fmt.Sprintf("run %d", id))
	}
	return r, nil
}

func listRuns(ctx context.Context, q querier, where string, args ...any) ([]store.Run, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+runCols+runFrom+` `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Run implements store.Store.
func (d *DB) Run(ctx context.Context, id int64) (store.Run, error) { return getRun(ctx, d.db, id) }

// RunSource implements store.Store.
func (d *DB) RunSource(ctx context.Context, id int64) (string, error) {
	var src string
	if err := d.db.QueryRowContext(ctx, `SELECT source FROM runs WHERE id = ?`, id).Scan(&src); err != nil {
		return "", notFound(err, fmt.Sprintf("run %d", id))
	}
	return src, nil
}

// Steps implements store.Store.
func (d *DB) Steps(ctx context.Context, runID int64) ([]store.Step, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT idx, name, state, exit_code, reason, updated_at, started_at, finished_at
		FROM steps WHERE run_id = ? ORDER BY idx`, runID)
	if err != nil {
		return nil, fmt.Errorf("list steps of run %d: %w", runID, err)
	}
	defer rows.Close()
	var out []store.Step
	for rows.Next() {
		var s store.Step
		var exit, started, finished sql.NullInt64
		var updated int64
		if err := rows.Scan(&s.Index, &s.Name, &s.State, &exit, &s.Reason, &updated, &started, &finished); err != nil {
			return nil, fmt.Errorf("list steps of run %d: %w", runID, err)
		}
		s.ExitCode, s.UpdatedAt = nullInt(exit), fromMS(updated)
		s.StartedAt, s.FinishedAt = nullTime(started), nullTime(finished)
		out = append(out, s)
	}
	return out, rows.Err()
}

// ListRuns implements store.Store.
func (d *DB) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	where, args := "WHERE 1=1", []any{}
	if f.RepoID != 0 {
		where += " AND r.repo_id = ?"
		args = append(args, f.RepoID)
	}
	if f.PipelineID != 0 {
		where += " AND r.pipeline_id = ?"
		args = append(args, f.PipelineID)
	}
	if f.OwnerID != 0 {
		where += " AND repos.owner_id = ?"
		args = append(args, f.OwnerID)
	}
	if f.Before != 0 {
		where += " AND r.id < ?"
		args = append(args, f.Before)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	return listRuns(ctx, d.db, where+" ORDER BY r.id DESC LIMIT ?", append(args, limit)...)
}

// runFinal lists the final run states, for SQL.
const runFinal = `('succeeded', 'failed', 'cancelled', 'errored', 'skipped')`

// waitsForGroup is true (SQL) for a run of table alias t that an older run
// of its repository and concurrency group, not yet ended, holds back.
func waitsForGroup(t string) string {
	return `(` + t + `.concurrency_group <> '' AND EXISTS (SELECT 1 FROM runs o WHERE o.repo_id = ` + t + `.repo_id
		AND o.concurrency_group = ` + t + `.concurrency_group AND o.id < ` + t + `.id AND o.state NOT IN ` + runFinal + `))`
}

// QueuedRuns implements store.Store. Runs that wait for an older run of
// their concurrency group, for their needs or for the environment of
// their previous attempt are left out.
func (d *DB) QueuedRuns(ctx context.Context, repoID int64) ([]store.Run, error) {
	return listRuns(ctx, d.db, "WHERE r.repo_id = ? AND r.state = ? AND NOT "+waitsForGroup("r")+
		" AND NOT "+waitsForNeeds("r")+" AND NOT "+waitsForEnv("r")+" ORDER BY r.id", repoID, api.StateQueued, ms(time.Now()))
}

// GroupHolder implements store.Store.
func (d *DB) GroupHolder(ctx context.Context, run store.Run) (int64, error) {
	if run.ConcurrencyGroup == "" {
		return 0, nil
	}
	var id int64
	err := d.db.QueryRowContext(ctx, `SELECT id FROM runs WHERE repo_id = ? AND concurrency_group = ? AND id < ?
		AND state NOT IN `+runFinal+` ORDER BY id LIMIT 1`, run.RepoID, run.ConcurrencyGroup, run.ID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("find the run holding run %d back: %w", run.ID, err)
	}
	return id, nil
}

// supersede cancels the runs of repoID's group older than run id that
// have not ended (cancel-in-progress), inside the transaction that
// creates run id: queued ones end cancelled/superseded now; claimed and
// running ones get a cancel request (their runner stops them, and their
// end reads cancelled/superseded).
func supersede(ctx context.Context, tx querier, repoID int64, group string, id int64, now time.Time) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, state FROM runs WHERE repo_id = ? AND concurrency_group = ?
		AND id < ? AND state NOT IN `+runFinal, repoID, group, id)
	if err != nil {
		return fmt.Errorf("find runs superseded by run %d: %w", id, err)
	}
	type old struct {
		id    int64
		state string
	}
	var olds []old
	for rows.Next() {
		var o old
		if err := rows.Scan(&o.id, &o.state); err != nil {
			rows.Close()
			return err
		}
		olds = append(olds, o)
	}
	rows.Close()
	msg := fmt.Sprintf("superseded by run %d (concurrency group %q, cancel-in-progress)", id, group)
	for _, o := range olds {
		if o.state == api.StateQueued {
			_, err = tx.ExecContext(ctx, `UPDATE runs SET superseded_by = ? WHERE id = ?`, id, o.id)
			if err == nil {
				_, err = endQueued(ctx, tx, o.id, api.StateCancelled, api.ReasonSuperseded, msg, now)
			}
			if err == nil {
				_, err = afterEnd(ctx, tx, o.id, now)
			}
		} else {
			_, err = tx.ExecContext(ctx, `UPDATE runs SET cancel_requested = TRUE, superseded_by = ? WHERE id = ?`, id, o.id)
		}
		if err != nil {
			return fmt.Errorf("cancel run %d, superseded by run %d: %w", o.id, id, err)
		}
	}
	return nil
}

// RunByToken implements store.Store.
func (d *DB) RunByToken(ctx context.Context, tokenHash string) (store.Run, error) {
	r, err := scanRun(d.db.QueryRowContext(ctx, `SELECT `+runCols+runFrom+` WHERE r.token_hash = ?`, tokenHash))
	if err != nil {
		return r, notFound(err, "run of token")
	}
	return r, nil
}

// ClaimRun implements store.Store. One conditional UPDATE is the
// compare-and-set: only the statement that still sees state = queued
// changes the row.
func (d *DB) ClaimRun(ctx context.Context, id int64, c store.Claim) (store.Run, error) {
	res, err := d.db.ExecContext(ctx, `UPDATE runs SET state = ?, runner_id = ?, runner_name = ?, token_hash = ?,
		claimed_at = ?, lease_expires = ? WHERE id = ? AND state = ? AND NOT `+waitsForGroup("runs")+`
		AND NOT `+waitsForNeeds("runs")+` AND NOT `+waitsForEnv("runs")+`
		AND (? = '' OR EXISTS (SELECT 1 FROM runners WHERE id = ? AND session = ? AND handed_over_at IS NULL))`,
		api.StateClaimed, c.RunnerID, c.RunnerName, c.TokenHash, ms(c.Now), ms(c.LeaseUntil), id, api.StateQueued,
		ms(c.Now), c.Session, c.RunnerID, c.Session)
	if err != nil {
		return store.Run{}, fmt.Errorf("claim run %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.Run{}, fmt.Errorf("claim run %d: no longer queued, waiting, or the runner's session ended: %w", id, store.ErrConflict)
	}
	return d.Run(ctx, id)
}

// RenewLease implements store.Store.
func (d *DB) RenewLease(ctx context.Context, id, runnerID int64, until time.Time) (store.Run, error) {
	var out store.Run
	err := d.tx(ctx, func(tx querier) error {
		r, err := getRun(ctx, tx, id)
		if err != nil {
			return err
		}
		if api.IsFinal(r.State) {
			out = r
			return fmt.Errorf("renew lease of run %d: %w", id, store.ErrRunFinished)
		}
		if r.RunnerID != runnerID || (r.State != api.StateClaimed && r.State != api.StateRunning) {
			return fmt.Errorf("renew lease of run %d: not held by this runner: %w", id, store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET lease_expires = ? WHERE id = ?`, ms(until), id); err != nil {
			return fmt.Errorf("renew lease of run %d: %w", id, err)
		}
		out, err = getRun(ctx, tx, id)
		return err
	})
	return out, err
}

// RotateRunToken implements store.Store.
func (d *DB) RotateRunToken(ctx context.Context, id, runnerID int64, tokenHash string, leaseUntil time.Time) (store.Run, error) {
	var out store.Run
	err := d.tx(ctx, func(tx querier) error {
		r, err := getRun(ctx, tx, id)
		if err != nil {
			return err
		}
		if api.IsFinal(r.State) {
			out = r
			return fmt.Errorf("rotate the token of run %d: %w", id, store.ErrRunFinished)
		}
		if r.RunnerID != runnerID || (r.State != api.StateClaimed && r.State != api.StateRunning) {
			return fmt.Errorf("rotate the token of run %d: not held by this runner: %w", id, store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET token_hash = ?, lease_expires = ? WHERE id = ?`,
			tokenHash, ms(leaseUntil), id); err != nil {
			return fmt.Errorf("rotate the token of run %d: %w", id, err)
		}
		out, err = getRun(ctx, tx, id)
		return err
	})
	return out, err
}

// stepFinal lists the step states an update to pending or running must not
// overwrite (a retried early update arriving late): api.StepFinalStates
// as an SQL list.
var stepFinal = "('" + strings.Join(api.StepFinalStates, "', '") + "')"

// stepIsFinal reports whether a step state is final (api.StepIsFinal).
func stepIsFinal(state string) bool { return api.StepIsFinal(state) }

// endedStep is the state a step that was running takes when its run ends
// in runState without the runner having reported the step's end.
func endedStep(runState string) string {
	switch runState {
	case api.StateCancelled:
		return api.StepCancelled
	case api.StateSucceeded:
		return api.StepSucceeded
	case api.StateErrored:
		return api.StepErrored
	}
	return api.StepFailed
}

// finishSteps ends every step of run id not in a final state, inside the
// transaction that ends the run with state and reason: a running step takes
// the run's outcome (cancelled for a cancelled run, succeeded for a
// succeeded one, failed otherwise) and reason; a pending step is skipped.
// Without it a run ended by the server (lapsed lease, cancel of a queued
// run) would show its steps running or pending forever.
func finishSteps(ctx context.Context, tx querier, id int64, state, reason string, at time.Time) error {
	running := endedStep(state)
	if _, err := tx.ExecContext(ctx, `UPDATE steps SET
			state = CASE WHEN state = ? THEN ? ELSE ? END,
			reason = CASE WHEN state = ? THEN ? ELSE reason END,
			finished_at = CASE WHEN state = ? THEN COALESCE(finished_at, ?) ELSE finished_at END,
			updated_at = ?
		WHERE run_id = ? AND state NOT IN `+stepFinal,
		api.StepRunning, running, api.StepSkipped, api.StepRunning, reason, api.StepRunning, ms(at), ms(at), id); err != nil {
		return fmt.Errorf("end the steps of run %d: %w", id, err)
	}
	return nil
}

// UpdateStep implements store.Store.
func (d *DB) UpdateStep(ctx context.Context, runID int64, s store.Step) (store.Run, error) {
	if s.UpdatedAt.IsZero() {
		s.UpdatedAt = time.Now()
	}
	at := s.At
	if at.IsZero() {
		at = s.UpdatedAt
	}
	var started, finished any
	switch {
	case s.State == api.StepRunning:
		started = ms(at)
	case stepIsFinal(s.State) && s.State != api.StepSkipped:
		finished = ms(at)
	}
	var out store.Run
	err := d.tx(ctx, func(tx querier) error {
		r, err := getRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		if api.IsFinal(r.State) && !stepIsFinal(s.State) {
			out = r // the run's end settled its steps; a late "running" changes nothing
			return nil
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO steps (run_id, idx, name, state, exit_code, reason, updated_at, started_at, finished_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (run_id, idx) DO UPDATE SET
				started_at = COALESCE(steps.started_at, excluded.started_at),
				finished_at = COALESCE(steps.finished_at, excluded.finished_at),
				name = CASE WHEN excluded.name <> '' THEN excluded.name ELSE steps.name END,
				state = CASE WHEN steps.state IN `+stepFinal+` AND excluded.state NOT IN `+stepFinal+`
					THEN steps.state ELSE excluded.state END,
				exit_code = CASE WHEN steps.state IN `+stepFinal+` AND excluded.state NOT IN `+stepFinal+`
					THEN steps.exit_code ELSE excluded.exit_code END,
				reason = CASE WHEN steps.state IN `+stepFinal+` AND excluded.state NOT IN `+stepFinal+`
					THEN steps.reason ELSE excluded.reason END,
				updated_at = excluded.updated_at`,
			runID, s.Index, s.Name, s.State, intArg(s.ExitCode), s.Reason, ms(s.UpdatedAt), started, finished); err != nil {
			return fmt.Errorf("update step %d of run %d: %w", s.Index, runID, err)
		}
		if s.State == api.StepRunning && r.State == api.StateClaimed {
			if _, err := tx.ExecContext(ctx, `UPDATE runs SET state = ?, started_at = COALESCE(started_at, ?)
				WHERE id = ? AND state = ?`, api.StateRunning, ms(s.UpdatedAt), runID, api.StateClaimed); err != nil {
				return fmt.Errorf("start run %d: %w", runID, err)
			}
		}
		out, err = getRun(ctx, tx, runID)
		return err
	})
	return out, err
}

// EnsureStep implements store.Store.
// A step first heard of (by its log) after its run ended is created already
// ended: it ran, and the run's end is all that is known of how.
func (d *DB) EnsureStep(ctx context.Context, runID int64, index int, name string, now time.Time) error {
	return d.tx(ctx, func(tx querier) error {
		r, err := getRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		state, reason := api.StepPending, ""
		if api.IsFinal(r.State) {
			state, reason = endedStep(r.State), r.Reason
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO steps (run_id, idx, name, state, reason, updated_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, idx) DO NOTHING`,
			runID, index, name, state, reason, ms(now)); err != nil {
			return fmt.Errorf("create step %d of run %d: %w", index, runID, err)
		}
		return nil
	})
}

func sameExit(a, b *int) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// CompleteRun implements store.Store.
func (d *DB) CompleteRun(ctx context.Context, id int64, f store.RunFinal) (store.Run, error) {
	if !api.IsFinal(f.State) {
		return store.Run{}, fmt.Errorf("complete run %d: %q is not a final state", id, f.State)
	}
	if f.At.IsZero() {
		f.At = time.Now()
	}
	var out store.Run
	err := d.tx(ctx, func(tx querier) error {
		r, err := getRun(ctx, tx, id)
		if err != nil {
			return err
		}
		if r.SupersededBy != 0 && f.State == api.StateCancelled && f.Reason == api.ReasonCancelled {
			// The cancel the runner obeyed was the newer run's.
			f.Reason = api.ReasonSuperseded
			f.Message = fmt.Sprintf("superseded by run %d (concurrency group %q, cancel-in-progress)", r.SupersededBy, r.ConcurrencyGroup)
		}
		reason, msg, err := cancelCause(ctx, tx, r.ID)
		if err != nil {
			return err
		}
		if reason != "" && f.State == api.StateCancelled && f.Reason == api.ReasonCancelled {
			f.Reason, f.Message = reason, msg // the server's own cancel (fail-fast)
		}
		if api.IsFinal(r.State) {
			out = r
			if r.State == f.State && r.Reason == f.Reason && sameExit(r.ExitCode, f.ExitCode) {
				return nil
			}
			return fmt.Errorf("complete run %d: already %s: %w", id, r.State, store.ErrRunFinished)
		}
		gone := envDeadline(r, f.At)
		if f.EnvironmentRemoved {
			gone = f.At
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET state = ?, reason = ?, message = ?, exit_code = ?,
			finished_at = ?, token_hash = NULL, lease_expires = NULL, exports = ?,
			env_gone_at = CASE WHEN env_gone_at IS NOT NULL AND env_gone_at < ? THEN env_gone_at ELSE ? END WHERE id = ?`,
			f.State, f.Reason, f.Message, intArg(f.ExitCode), ms(f.At), jsonMap(f.Exports), ms(gone), ms(gone), id); err != nil {
			return fmt.Errorf("complete run %d: %w", id, err)
		}
		if err := finishSteps(ctx, tx, id, f.State, f.Reason, f.At); err != nil {
			return err
		}
		follow, err := afterEnd(ctx, tx, id, f.At)
		if err != nil {
			return err
		}
		out, err = getRun(ctx, tx, id)
		out.Followups = follow
		return err
	})
	return out, err
}

// cancelCause is the reason and message of a cancel the server asked for
// on its own (fail-fast) on run id; "" when none. Its error is the
// query's: one that fails aborts a PostgreSQL transaction, so it must end
// the transaction (to be retried when the dialect says so) rather than
// leave the next statement to fail as "current transaction is aborted".
func cancelCause(ctx context.Context, tx querier, id int64) (reason, msg string, err error) {
	var r, m sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT cancel_reason, cancel_message FROM runs WHERE id = ?`, id).Scan(&r, &m); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", "", fmt.Errorf("read the cancel of run %d: %w", id, err)
	}
	return r.String, m.String, nil
}

// CancelRun implements store.Store.
func (d *DB) CancelRun(ctx context.Context, id int64, now time.Time) (store.Run, error) {
	var out store.Run
	err := d.tx(ctx, func(tx querier) error {
		r, err := getRun(ctx, tx, id)
		if err != nil {
			return err
		}
		out = r
		switch {
		case api.IsFinal(r.State):
			return fmt.Errorf("cancel run %d: already %s: %w", id, r.State, store.ErrRunFinished)
		case r.State == api.StateQueued:
			_, err = endQueued(ctx, tx, id, api.StateCancelled, api.ReasonCancelled, "cancelled before a runner claimed it", now)
		default:
			_, err = tx.ExecContext(ctx, `UPDATE runs SET cancel_requested = TRUE WHERE id = ?`, id)
		}
		if err != nil {
			return fmt.Errorf("cancel run %d: %w", id, err)
		}
		follow, err := afterEnd(ctx, tx, id, now)
		if err != nil {
			return err
		}
		out, err = getRun(ctx, tx, id)
		out.Followups = follow
		return err
	})
	return out, err
}

// ExpireLeases implements store.Store.
func (d *DB) ExpireLeases(ctx context.Context, now time.Time) ([]store.Run, error) {
	// A read first: the sweeper calls this every second and usually finds
	// nothing, which must not take the write lock.
	var lapsed bool
	if err := d.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE state IN (?, ?) AND lease_expires < ?)`,
		api.StateClaimed, api.StateRunning, ms(now)).Scan(&lapsed); err != nil {
		return nil, fmt.Errorf("look for lapsed leases: %w", err)
	}
	if !lapsed {
		return nil, nil
	}
	var out []store.Run
	err := d.tx(ctx, func(tx querier) error {
		out = nil // empty again when the transaction is retried
		lapsed, err := listRuns(ctx, tx, `WHERE r.state IN (?, ?) AND r.lease_expires < ?`,
			api.StateClaimed, api.StateRunning, ms(now))
		if err != nil {
			return err
		}
		for _, r := range lapsed {
			heard := "never"
			var last, handedOver sql.NullInt64
			err := tx.QueryRowContext(ctx, `SELECT last_seen_at, handed_over_at FROM runners WHERE id = ?`,
				r.RunnerID).Scan(&last, &handedOver)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("read runner of run %d: %w", r.ID, err)
			}
			if last.Valid {
				heard = fromMS(last.Int64).Format(time.RFC3339)
			}
			state, reason := api.StateErrored, api.ReasonRunnerLost
			msg := fmt.Sprintf("runner %s stopped renewing the lease (last heard from: %s; lease expired at %s)",
				r.RunnerName, heard, r.LeaseExpires.Format(time.RFC3339))
			if handedOver.Valid {
				// Its last session handed the run over and none started
				// since: the runner was not lost, nobody took over.
				msg = fmt.Sprintf("runner %s handed the run over at %s and no new runner process took it within the handover grace (until %s)",
					r.RunnerName, fromMS(handedOver.Int64).Format(time.RFC3339), r.LeaseExpires.Format(time.RFC3339))
			}
			if r.CancelRequested {
				state, reason = api.StateCancelled, api.ReasonCancelled
				if handedOver.Valid {
					msg = "cancelled; " + msg
				} else {
					msg = "cancelled; " + msg + " before confirming the cancel"
				}
			}
			ended, err := endHeldRun(ctx, tx, r.ID, state, reason, msg, now)
			if err != nil {
				return err
			}
			out = append(out, ended)
		}
		return nil
	})
	return out, err
}

// endHeldRun ends run id, which a runner held, with state, reason and
// msg at now (its token and lease dropped, its unfinished steps ended by
// finishSteps) and returns it as it ended.
//
// Nobody reports that its environment is gone: that is known at its
// timeout past its start (envDeadline), or when its runner's next
// process says so (EnvironmentsGone). What its end does to the other
// runs is done too (afterEnd; Run.Followups).
func endHeldRun(ctx context.Context, tx querier, id int64, state, reason, msg string, now time.Time) (store.Run, error) {
	r, err := getRun(ctx, tx, id)
	if err != nil {
		return r, err
	}
	cause, causeMsg, err := cancelCause(ctx, tx, id)
	if err != nil {
		return r, err
	}
	if cause != "" && state == api.StateCancelled && reason == api.ReasonCancelled {
		reason, msg = cause, causeMsg+"; "+msg
	}
	if _, err := tx.ExecContext(ctx, `UPDATE runs SET state = ?, reason = ?, message = ?, finished_at = ?,
		token_hash = NULL, lease_expires = NULL, env_gone_at = ? WHERE id = ?`, state, reason, msg, ms(now),
		ms(envDeadline(r, now)), id); err != nil {
		return store.Run{}, fmt.Errorf("end run %d: %w", id, err)
	}
	if err := finishSteps(ctx, tx, id, state, reason, now); err != nil {
		return store.Run{}, err
	}
	follow, err := afterEnd(ctx, tx, id, now)
	if err != nil {
		return store.Run{}, err
	}
	out, err := getRun(ctx, tx, id)
	out.Followups = follow
	return out, err
}

// ExtendLeases implements store.Store.
func (d *DB) ExtendLeases(ctx context.Context, until time.Time) (int, error) {
	res, err := d.db.ExecContext(ctx, `UPDATE runs SET lease_expires = CASE WHEN lease_expires > ? THEN lease_expires ELSE ? END
		WHERE state IN (?, ?)`, ms(until), ms(until), api.StateClaimed, api.StateRunning)
	if err != nil {
		return 0, fmt.Errorf("extend leases: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
