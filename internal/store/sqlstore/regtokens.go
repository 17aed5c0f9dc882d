package sqlstore

import (
	"context"
	"fmt"
	"time"

	"knotless.dev/knotless/internal/store"
)

// CreateRegistrationToken implements store.Store.
func (d *DB) CreateRegistrationToken(ctx context.Context, t store.RegistrationToken, maxLive int) error {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	return d.tx(ctx, func(tx querier) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM registration_tokens WHERE expires_at <= ?`, ms(t.CreatedAt)); err != nil {
			return fmt.Errorf("delete expired registration tokens: %w", err)
		}
		if maxLive > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM registration_tokens WHERE repo_id = ?`, t.RepoID).Scan(&n); err != nil {
				return fmt.Errorf("count registration tokens: %w", err)
			}
			if n >= maxLive {
				return fmt.Errorf("%d unexpired registration tokens: %w", n, store.ErrLimit)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO registration_tokens (hash, repo_id, created_by, uses_left, expires_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`, t.Hash, t.RepoID, t.CreatedBy, t.UsesLeft, ms(t.ExpiresAt), ms(t.CreatedAt))
		if err != nil {
			return fmt.Errorf("store registration token: %w", err)
		}
		return nil
	})
}

// RegistrationToken implements store.Store.
func (d *DB) RegistrationToken(ctx context.Context, hash string, now time.Time) (store.RegistrationToken, error) {
	var t store.RegistrationToken
	var expires, created int64
	err := d.db.QueryRowContext(ctx, `SELECT t.hash, t.repo_id, a.handle || '/' || r.name, t.created_by, t.uses_left, t.expires_at, t.created_at
		FROM registration_tokens t JOIN repos r ON r.id = t.repo_id JOIN accounts a ON a.id = r.owner_id
		WHERE t.hash = ? AND t.expires_at > ?`, hash, ms(now)).
		Scan(&t.Hash, &t.RepoID, &t.Repo, &t.CreatedBy, &t.UsesLeft, &expires, &created)
	if err != nil {
		return t, notFound(err, "registration token")
	}
	t.ExpiresAt, t.CreatedAt = fromMS(expires), fromMS(created)
	return t, nil
}

// UseRegistrationToken implements store.Store.
func (d *DB) UseRegistrationToken(ctx context.Context, hash string, repoID int64, now time.Time) error {
	res, err := d.db.ExecContext(ctx, `UPDATE registration_tokens SET uses_left = uses_left - 1
		WHERE hash = ? AND repo_id = ? AND uses_left > 0 AND expires_at > ?`, hash, repoID, ms(now))
	if err != nil {
		return fmt.Errorf("use registration token: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("use registration token: %w", err)
	} else if n == 0 {
		return fmt.Errorf("registration token: %w", store.ErrNotFound)
	}
	return nil
}

// ReturnRegistrationToken implements store.Store.
func (d *DB) ReturnRegistrationToken(ctx context.Context, hash string) error {
	if _, err := d.db.ExecContext(ctx, `UPDATE registration_tokens SET uses_left = uses_left + 1 WHERE hash = ?`, hash); err != nil {
		return fmt.Errorf("return registration token: %w", err)
	}
	return nil
}
