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

const runnerCols = `x.id, x.repo_id, a.handle || '/' || r.name, x.name, x.did, x.public_key, x.labels,
	x.status, x.created_at, x.last_seen_at, x.session, x.session_started_at, x.handed_over_at, x.handover_until`
const runnerFrom = ` FROM runners x JOIN repos r ON r.id = x.repo_id JOIN accounts a ON a.id = r.owner_id`

func scanRunner(row interface{ Scan(...any) error }) (store.Runner, error) {
	var x store.Runner
	var labels string
	var created int64
	var seen, started, handedOver, handoverUntil sql.NullInt64
	err := row.Scan(&x.ID, &x.RepoID, &x.Repo, &x.Name, &x.DID, &x.PublicKey, &labels, &x.Status, &created, &seen,
		&x.Session, &started, &handedOver, &handoverUntil)
	x.Labels = parseList(labels)
	x.CreatedAt, x.LastSeenAt = fromMS(created), nullTime(seen)
	x.SessionStartedAt, x.HandedOverAt, x.HandoverUntil = nullTime(started), nullTime(handedOver), nullTime(handoverUntil)
	return x, err
}

func getRunner(ctx context.Context, q querier, where string, args ...any) (store.Runner, error) {
	return scanRunner(q.QueryRowContext(ctx, `SELECT `+runnerCols+runnerFrom+` WHERE `+where, args...))
}

// RegisterRunner implements store.Store.
func (d *DB) RegisterRunner(ctx context.Context, in store.Runner, maxPending int) (store.Runner, bool, error) {
	if in.CreatedAt.IsZero() {
		in.CreatedAt = time.Now()
	}
	var out store.Runner
	var created bool
	err := d.tx(ctx, func(tx querier) error {
		created = false
		byDID, err := getRunner(ctx, tx, `x.did = ?`, in.DID)
		switch {
		case err == nil:
			if byDID.RepoID != in.RepoID || byDID.Name != in.Name {
				return fmt.Errorf("this key is already registered as runner %q of %s: %w",
					byDID.Name, byDID.Repo, store.ErrConflict)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE runners SET labels = ? WHERE id = ?`,
				jsonList(in.Labels), byDID.ID); err != nil {
				return fmt.Errorf("update runner %s: %w", in.Name, err)
			}
			out, err = getRunner(ctx, tx, `x.id = ?`, byDID.ID)
			return err
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read runner: %w", err)
		}
		if maxPending > 0 {
			var pending int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM runners WHERE repo_id = ? AND status = ?`,
				in.RepoID, api.RunnerPending).Scan(&pending); err != nil {
				return fmt.Errorf("count pending runners: %w", err)
			}
			if pending >= maxPending {
				return fmt.Errorf("%d runners await approval: %w", pending, store.ErrLimit)
			}
		}
		var id int64
		err = tx.QueryRowContext(ctx, `INSERT INTO runners (repo_id, name, did, public_key, labels, status, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`, in.RepoID, in.Name, in.DID, in.PublicKey, jsonList(in.Labels),
			api.RunnerPending, ms(in.CreatedAt)).Scan(&id)
		if err != nil {
			if d.isUnique(err) {
				return fmt.Errorf("runner name %q is taken by another key: %w", in.Name, store.ErrConflict)
			}
			return fmt.Errorf("insert runner %s: %w", in.Name, err)
		}
		created = true
		out, err = getRunner(ctx, tx, `x.id = ?`, id)
		return err
	})
	return out, created, err
}

// RunnerByDID implements store.Store.
func (d *DB) RunnerByDID(ctx context.Context, did string) (store.Runner, error) {
	x, err := getRunner(ctx, d.db, `x.did = ?`, did)
	if err != nil {
		return x, notFound(err, "runner "+did)
	}
	return x, nil
}

// RunnerByName implements store.Store.
func (d *DB) RunnerByName(ctx context.Context, repoID int64, name string) (store.Runner, error) {
	x, err := getRunner(ctx, d.db, `x.repo_id = ? AND x.name = ?`, repoID, name)
	if err != nil {
		return x, notFound(err, "runner "+name)
	}
	return x, nil
}

// ListRunners implements store.Store.
func (d *DB) ListRunners(ctx context.Context, repoID int64, after string, limit int) ([]store.Runner, error) {
	if limit <= 0 {
		limit = noLimit
	}
	rows, err := d.db.QueryContext(ctx, `SELECT `+runnerCols+runnerFrom+` WHERE x.repo_id = ? AND x.name > ? ORDER BY x.name LIMIT ?`,
		repoID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list runners: %w", err)
	}
	defer rows.Close()
	var out []store.Runner
	for rows.Next() {
		x, err := scanRunner(rows)
		if err != nil {
			return nil, fmt.Errorf("list runners: %w", err)
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// ApproveRunner implements store.Store.
func (d *DB) ApproveRunner(ctx context.Context, id int64) (store.Runner, error) {
	res, err := d.db.ExecContext(ctx, `UPDATE runners SET status = ? WHERE id = ?`, api.RunnerApproved, id)
	if err != nil {
		return store.Runner{}, fmt.Errorf("approve runner %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.Runner{}, fmt.Errorf("runner %d: %w", id, store.ErrNotFound)
	}
	x, err := getRunner(ctx, d.db, `x.id = ?`, id)
	if err != nil {
		return x, notFound(err, fmt.Sprintf("runner %d", id))
	}
	return x, nil
}

// RemoveRunner implements store.Store.
func (d *DB) RemoveRunner(ctx context.Context, id int64, by string, now time.Time) ([]store.Run, error) {
	var out []store.Run
	err := d.tx(ctx, func(tx querier) error {
		out = nil // empty again when the transaction is retried
		var name string
		var last sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT name, last_seen_at FROM runners WHERE id = ?`, id).Scan(&name, &last)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("runner %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read runner %d: %w", id, err)
		}
		heard := "never"
		if last.Valid {
			heard = fromMS(last.Int64).Format(time.RFC3339)
		}
		held, err := listRuns(ctx, tx, `WHERE r.runner_id = ? AND r.state IN (?, ?)`, id, api.StateClaimed, api.StateRunning)
		if err != nil {
			return err
		}
		for _, r := range held {
			state, reason := api.StateErrored, api.ReasonRunnerLost
			msg := fmt.Sprintf("runner %s was removed by %s at %s while it held the run (last heard from: %s)",
				name, by, now.UTC().Format(time.RFC3339), heard)
			if r.CancelRequested {
				state, reason, msg = api.StateCancelled, api.ReasonCancelled, "cancelled; "+msg
			}
			ended, err := endHeldRun(ctx, tx, r.ID, state, reason, msg, now)
			if err != nil {
				return err
			}
			out = append(out, ended)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM runners WHERE id = ?`, id); err != nil {
			return fmt.Errorf("remove runner %d: %w", id, err)
		}
		return nil
	})
	return out, err
}

// TouchRunner implements store.Store.
func (d *DB) TouchRunner(ctx context.Context, id int64, at time.Time) error {
	if _, err := d.db.ExecContext(ctx, `UPDATE runners SET last_seen_at = ? WHERE id = ?`, ms(at), id); err != nil {
		return fmt.Errorf("record runner %d last seen: %w", id, err)
	}
	return nil
}

// SetSecret implements store.Store.
func (d *DB) SetSecret(ctx context.Context, s store.Secret) error {
	if s.UpdatedAt.IsZero() {
		s.UpdatedAt = time.Now()
	}
	_, err := d.db.ExecContext(ctx, `INSERT INTO secrets (repo_id, name, runner, ciphertext, updated_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (repo_id, name, runner) DO UPDATE SET
		ciphertext = excluded.ciphertext, updated_at = excluded.updated_at`,
		s.RepoID, s.Name, s.Runner, s.Ciphertext, ms(s.UpdatedAt))
	if err != nil {
		return fmt.Errorf("store secret %s: %w", s.Name, err)
	}
	return nil
}

// ListSecrets implements store.Store.
func (d *DB) ListSecrets(ctx context.Context, repoID int64) ([]store.Secret, error) {
	return d.secrets(ctx, false, `WHERE repo_id = ? ORDER BY name, runner`, repoID)
}

// SecretsFor implements store.Store.
func (d *DB) SecretsFor(ctx context.Context, repoID int64, names []string) ([]store.Secret, error) {
	if len(names) == 0 {
		return nil, nil
	}
	args := []any{repoID}
	for _, n := range names {
		args = append(args, n)
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ")
	return d.secrets(ctx, true, `WHERE repo_id = ? AND name IN (`+marks+`) ORDER BY name, runner`, args...)
}

func (d *DB) secrets(ctx context.Context, withValue bool, where string, args ...any) ([]store.Secret, error) {
	cols := `repo_id, name, runner, NULL, updated_at`
	if withValue {
		cols = `repo_id, name, runner, ciphertext, updated_at`
	}
	rows, err := d.db.QueryContext(ctx, `SELECT `+cols+` FROM secrets `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	var out []store.Secret
	for rows.Next() {
		var s store.Secret
		var updated int64
		if err := rows.Scan(&s.RepoID, &s.Name, &s.Runner, &s.Ciphertext, &updated); err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		s.UpdatedAt = fromMS(updated)
		out = append(out, s)
	}
	return out, rows.Err()
}

// DeleteSecret implements store.Store.
func (d *DB) DeleteSecret(ctx context.Context, repoID int64, name, runner string) error {
	res, err := d.db.ExecContext(ctx, `DELETE FROM secrets WHERE repo_id = ? AND name = ? AND runner = ?`,
		repoID, name, runner)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("secret %s: %w", name, store.ErrNotFound)
	}
	return nil
}
