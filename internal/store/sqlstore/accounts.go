package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"knotless.dev/knotless/internal/store"
)

// CreateAccount implements store.Store.
func (d *DB) CreateAccount(ctx context.Context, a store.Account, tokenHash string) (store.Account, error) {
	if a.CreatedAt.IsZero() {
		a.CreatedAt = time.Now()
	}
	err := d.tx(ctx, func(tx querier) error {
		err := tx.QueryRowContext(ctx,
			`INSERT INTO accounts (handle, did, admin, created_at) VALUES (?, ?, ?, ?) RETURNING id`,
			a.Handle, a.DID, a.Admin, ms(a.CreatedAt)).Scan(&a.ID)
		if err != nil {
			if d.isUnique(err) {
				return fmt.Errorf("account %q: handle or DID taken: %w", a.Handle, store.ErrConflict)
			}
			return fmt.Errorf("insert account %q: %w", a.Handle, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO tokens (account_id, name, hash, created_at) VALUES (?, ?, ?, ?)`,
			a.ID, store.InitialTokenName, tokenHash, ms(a.CreatedAt)); err != nil {
			return fmt.Errorf("insert token of account %q: %w", a.Handle, err)
		}
		return nil
	})
	if err != nil {
		return store.Account{}, err
	}
	a.CreatedAt = fromMS(ms(a.CreatedAt))
	return a, nil
}

const accountCols = `a.id, a.handle, a.did, a.admin, a.disabled, a.created_at`

func scanAccount(row interface{ Scan(...any) error }, more ...any) (store.Account, error) {
	var a store.Account
	var created int64
	err := row.Scan(append([]any{&a.ID, &a.Handle, &a.DID, &a.Admin, &a.Disabled, &created}, more...)...)
	a.CreatedAt = fromMS(created)
	return a, err
}

// AccountByHandle implements store.Store.
func (d *DB) AccountByHandle(ctx context.Context, handle string) (store.Account, error) {
	a, err := scanAccount(d.db.QueryRowContext(ctx,
		`SELECT `+accountCols+` FROM accounts a WHERE a.handle = ?`, handle))
	if err != nil {
		return a, notFound(err, "account "+handle)
	}
	return a, nil
}

// AccountByToken implements store.Store.
func (d *DB) AccountByToken(ctx context.Context, tokenHash string, now time.Time) (store.Account, error) {
	var id int64
	var name string
	var expires, used sql.NullInt64
	a, err := scanAccount(d.db.QueryRowContext(ctx,
		`SELECT `+accountCols+`, t.id, t.name, t.expires_at, t.last_used_at
		 FROM accounts a JOIN tokens t ON t.account_id = a.id WHERE t.hash = ?`, tokenHash),
		&id, &name, &expires, &used)
	if err != nil {
		return store.Account{}, notFound(err, "account of token")
	}
	if expires.Valid && expires.Int64 <= ms(now) {
		return store.Account{}, fmt.Errorf("token %s of %s expired at %s: %w",
			name, a.Handle, fromMS(expires.Int64).Format(time.RFC3339), store.ErrTokenExpired)
	}
	if a.Disabled {
		return store.Account{}, fmt.Errorf("account %s: %w", a.Handle, store.ErrAccountDisabled)
	}
	if !used.Valid || used.Int64 <= ms(now.Add(-store.TokenTouchInterval)) {
		// Best effort: a failed write must not refuse a valid token.
		_, _ = d.db.ExecContext(ctx, `UPDATE tokens SET last_used_at = ? WHERE id = ?`, ms(now), id)
	}
	return a, nil
}

// SetAccountDisabled implements store.Store.
func (d *DB) SetAccountDisabled(ctx context.Context, handle string, disabled bool) (store.Account, error) {
	res, err := d.db.ExecContext(ctx, `UPDATE accounts SET disabled = ? WHERE handle = ?`, disabled, handle)
	if err != nil {
		return store.Account{}, fmt.Errorf("update account %s: %w", handle, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.Account{}, fmt.Errorf("account %s: %w", handle, store.ErrNotFound)
	}
	return d.AccountByHandle(ctx, handle)
}

const tokenCols = `id, account_id, name, hash, created_at, expires_at, last_used_at`

func scanToken(row interface{ Scan(...any) error }) (store.Token, error) {
	var t store.Token
	var created int64
	var expires, used sql.NullInt64
	err := row.Scan(&t.ID, &t.AccountID, &t.Name, &t.Hash, &created, &expires, &used)
	t.CreatedAt, t.ExpiresAt, t.LastUsedAt = fromMS(created), nullTime(expires), nullTime(used)
	return t, err
}

// CreateToken implements store.Store.
func (d *DB) CreateToken(ctx context.Context, t store.Token, max int) (store.Token, error) {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	var expires any
	if t.ExpiresAt != nil {
		expires = ms(*t.ExpiresAt)
	}
	err := d.tx(ctx, func(tx querier) error {
		if max > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens WHERE account_id = ?`, t.AccountID).Scan(&n); err != nil {
				return fmt.Errorf("count tokens: %w", err)
			}
			if n >= max {
				return fmt.Errorf("the account has %d tokens: %w", n, store.ErrLimit)
			}
		}
		err := tx.QueryRowContext(ctx,
			`INSERT INTO tokens (account_id, name, hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?) RETURNING id`,
			t.AccountID, t.Name, t.Hash, ms(t.CreatedAt), expires).Scan(&t.ID)
		if err != nil {
			if d.isUnique(err) {
				return fmt.Errorf("token %s: %w", t.Name, store.ErrConflict)
			}
			return fmt.Errorf("insert token %s: %w", t.Name, err)
		}
		return nil
	})
	if err != nil {
		return store.Token{}, err
	}
	return scanToken(d.db.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM tokens WHERE id = ?`, t.ID))
}

// ListTokens implements store.Store.
func (d *DB) ListTokens(ctx context.Context, accountID int64) ([]store.Token, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT `+tokenCols+` FROM tokens WHERE account_id = ? ORDER BY name`, accountID)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []store.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// DeleteToken implements store.Store.
func (d *DB) DeleteToken(ctx context.Context, accountID int64, name string, keepLast bool) error {
	return d.tx(ctx, func(tx querier) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens WHERE account_id = ?`, accountID).Scan(&n); err != nil {
			return fmt.Errorf("count tokens: %w", err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE account_id = ? AND name = ?`, accountID, name)
		if err != nil {
			return fmt.Errorf("delete token %s: %w", name, err)
		}
		if k, _ := res.RowsAffected(); k == 0 {
			return fmt.Errorf("token %s: %w", name, store.ErrNotFound)
		}
		if keepLast && n <= 1 {
			return fmt.Errorf("token %s is the account's last: %w", name, store.ErrLimit)
		}
		return nil
	})
}

const repoCols = `r.id, r.owner_id, a.handle, r.name, r.created_at`
const repoFrom = ` FROM repos r JOIN accounts a ON a.id = r.owner_id`

func scanRepo(row interface{ Scan(...any) error }) (store.Repo, error) {
	var r store.Repo
	var created int64
	err := row.Scan(&r.ID, &r.OwnerID, &r.Owner, &r.Name, &created)
	r.CreatedAt = fromMS(created)
	return r, err
}

// CreateRepo implements store.Store.
func (d *DB) CreateRepo(ctx context.Context, ownerID int64, name string, now time.Time) (store.Repo, error) {
	var id int64
	err := d.db.QueryRowContext(ctx, `INSERT INTO repos (owner_id, name, created_at) VALUES (?, ?, ?) RETURNING id`,
		ownerID, name, ms(now)).Scan(&id)
	if err != nil {
		if d.isUnique(err) {
			return store.Repo{}, fmt.Errorf("repository %s: %w", name, store.ErrConflict)
		}
		return store.Repo{}, fmt.Errorf("insert repository %s: %w", name, err)
	}
	return d.RepoByID(ctx, id)
}

// RepoByName implements store.Store.
func (d *DB) RepoByName(ctx context.Context, owner, name string) (store.Repo, error) {
	r, err := scanRepo(d.db.QueryRowContext(ctx,
		`SELECT `+repoCols+repoFrom+` WHERE a.handle = ? AND r.name = ?`, owner, name))
	if err != nil {
		return r, notFound(err, "repository "+owner+"/"+name)
	}
	return r, nil
}

// RepoByID implements store.Store.
func (d *DB) RepoByID(ctx context.Context, id int64) (store.Repo, error) {
	r, err := scanRepo(d.db.QueryRowContext(ctx, `SELECT `+repoCols+repoFrom+` WHERE r.id = ?`, id))
	if err != nil {
		return r, notFound(err, fmt.Sprintf("repository %d", id))
	}
	return r, nil
}

// ListRepos implements store.Store.
func (d *DB) ListRepos(ctx context.Context, ownerID int64) ([]store.Repo, error) {
	q := `SELECT ` + repoCols + repoFrom
	var args []any
	if ownerID != 0 {
		q += ` WHERE r.owner_id = ?`
		args = append(args, ownerID)
	}
	rows, err := d.db.QueryContext(ctx, q+` ORDER BY a.handle, r.name`, args...)
	if err != nil {
		return nil, fmt.Errorf("list repositories: %w", err)
	}
	defer rows.Close()
	var out []store.Repo
	for rows.Next() {
		r, err := scanRepo(rows)
		if err != nil {
			return nil, fmt.Errorf("list repositories: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
