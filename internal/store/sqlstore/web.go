package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// CreateWebSession implements store.Store.
func (d *DB) CreateWebSession(ctx context.Context, s store.WebSession) error {
	return d.tx(ctx, func(tx querier) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM web_sessions WHERE expires_at <= ?`, ms(s.CreatedAt)); err != nil {
			return fmt.Errorf("delete expired web sessions: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO web_sessions (id_hash, token_hash, csrf, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?)`, s.IDHash, s.TokenHash, s.CSRF, ms(s.CreatedAt), ms(s.ExpiresAt)); err != nil {
			return fmt.Errorf("create web session: %w", err)
		}
		return nil
	})
}

// WebSession implements store.Store.
func (d *DB) WebSession(ctx context.Context, idHash string, now time.Time) (store.WebSession, error) {
	s := store.WebSession{IDHash: idHash}
	var created, expires int64
	err := d.db.QueryRowContext(ctx, `SELECT token_hash, csrf, created_at, expires_at FROM web_sessions
		WHERE id_hash = ? AND expires_at > ?`, idHash, ms(now)).Scan(&s.TokenHash, &s.CSRF, &created, &expires)
	if err != nil {
		return s, notFound(err, "web session")
	}
	s.CreatedAt, s.ExpiresAt = fromMS(created), fromMS(expires)
	return s, nil
}

// DeleteWebSession implements store.Store.
func (d *DB) DeleteWebSession(ctx context.Context, idHash string) error {
	if _, err := d.db.ExecContext(ctx, `DELETE FROM web_sessions WHERE id_hash = ?`, idHash); err != nil {
		return fmt.Errorf("delete web session: %w", err)
	}
	return nil
}

// ListPipelines implements store.Store.
func (d *DB) ListPipelines(ctx context.Context, f store.PipelineFilter) ([]store.Pipeline, error) {
	if f.Limit <= 0 {
		f.Limit = 20
	}
	if f.Before <= 0 {
		f.Before = 1<<63 - 1
	}
	where := ` WHERE p.repo_id = ? AND p.id < ?`
	args := []any{f.RepoID, f.Before}
	if f.Ref != "" {
		where += ` AND p.ref = ?`
		args = append(args, f.Ref)
	}
	if f.SHA != "" {
		where += ` AND p.sha = ?`
		args = append(args, f.SHA)
	}
	if f.State != "" || f.Workflow != "" {
		where += ` AND EXISTS (SELECT 1 FROM runs x WHERE x.pipeline_id = p.id AND (? = '' OR x.state = ?) AND (? = '' OR x.workflow = ?))`
		args = append(args, f.State, f.State, f.Workflow, f.Workflow)
	}
	if f.Empty {
		where += ` AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.pipeline_id = p.id)`
	}
	rows, err := d.db.QueryContext(ctx, `SELECT `+pipelineCols+pipelineFrom+where+` ORDER BY p.id DESC LIMIT ?`, append(args, f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list pipelines: %w", err)
	}
	defer rows.Close()
	var out []store.Pipeline
	for rows.Next() {
		p, err := scanPipeline(rows)
		if err != nil {
			return nil, fmt.Errorf("list pipelines: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// RunWorkflows implements store.Store.
func (d *DB) RunWorkflows(ctx context.Context, repoID int64, limit int) ([]string, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT DISTINCT workflow FROM
		(SELECT workflow FROM runs WHERE repo_id = ? ORDER BY id DESC LIMIT 1000) AS recent ORDER BY workflow LIMIT ?`, repoID, limit)
	if err != nil {
		return nil, fmt.Errorf("list workflows of runs: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, fmt.Errorf("list workflows of runs: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// RunsOfPipelines implements store.Store.
func (d *DB) RunsOfPipelines(ctx context.Context, ids []int64) ([]store.Run, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	marks := strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")
	return listRuns(ctx, d.db, `WHERE r.pipeline_id IN (`+marks+`) ORDER BY r.id`, args...)
}

// ActiveRuns implements store.Store.
func (d *DB) ActiveRuns(ctx context.Context, repoID int64) ([]store.Run, error) {
	return listRuns(ctx, d.db, `WHERE r.repo_id = ? AND r.state IN (?, ?) ORDER BY r.id`,
		repoID, api.StateClaimed, api.StateRunning)
}

// SetRunnerProcess implements store.Store.
func (d *DB) SetRunnerProcess(ctx context.Context, p store.RunnerProcess) error {
	facts := ""
	if len(p.Facts) > 0 {
		b, _ := json.Marshal(p.Facts)
		facts = string(b)
	}
	_, err := d.db.ExecContext(ctx, `INSERT INTO runner_processes (runner_id, executor, version, started_at, digest, capacity, facts)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (runner_id) DO UPDATE SET executor = excluded.executor,
		version = excluded.version, started_at = excluded.started_at, digest = excluded.digest,
		capacity = excluded.capacity, facts = excluded.facts`, p.RunnerID, p.Executor, p.Version, ms(p.StartedAt),
		p.Digest, p.Capacity, facts)
	if err != nil {
		return fmt.Errorf("record process of runner %d: %w", p.RunnerID, err)
	}
	return nil
}

// RunnerProcesses implements store.Store.
func (d *DB) RunnerProcesses(ctx context.Context, repoID int64) (map[int64]store.RunnerProcess, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT p.runner_id, p.executor, p.version, p.started_at, p.digest, p.capacity, p.facts
		FROM runner_processes p JOIN runners x ON x.id = p.runner_id WHERE x.repo_id = ?`, repoID)
	if err != nil {
		return nil, fmt.Errorf("list runner processes: %w", err)
	}
	defer rows.Close()
	out := map[int64]store.RunnerProcess{}
	for rows.Next() {
		var p store.RunnerProcess
		var started int64
		var facts string
		if err := rows.Scan(&p.RunnerID, &p.Executor, &p.Version, &started, &p.Digest, &p.Capacity, &facts); err != nil {
			return nil, fmt.Errorf("list runner processes: %w", err)
		}
		if facts != "" {
			_ = json.Unmarshal([]byte(facts), &p.Facts)
		}
		p.StartedAt = fromMS(started)
		out[p.RunnerID] = p
	}
	return out, rows.Err()
}
