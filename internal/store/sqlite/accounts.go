package sqlite

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
	err := d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`INSERT INTO accounts (handle, did, admin, created_at) VALUES (?, ?, ?, ?)`,
			a.Handle, a.DID, a.Admin, ms(a.CreatedAt))
		if err != nil {
			if isUnique(err) {
				return fmt.Errorf("account %q: handle or DID taken: %w", a.Handle, store.ErrConflict)
			}
			return fmt.Errorf("insert account %q: %w", a.Handle, err)
		}
		a.ID, _ = res.LastInsertId()
		if _, err := tx.ExecContext(ctx, `INSERT INTO tokens (hash, account_id, created_at) VALUES (?, ?, ?)`,
			tokenHash, a.ID, ms(a.CreatedAt)); err != nil {
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

const accountCols = `a.id, a.handle, a.did, a.admin, a.created_at`

func scanAccount(row interface{ Scan(...any) error }) (store.Account, error) {
	var a store.Account
	var created int64
	err := row.Scan(&a.ID, &a.Handle, &a.DID, &a.Admin, &created)
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
func (d *DB) AccountByToken(ctx context.Context, tokenHash string) (store.Account, error) {
	a, err := scanAccount(d.db.QueryRowContext(ctx,
		`SELECT `+accountCols+` FROM accounts a JOIN tokens t ON t.account_id = a.id WHERE t.hash = ?`, tokenHash))
	if err != nil {
		return a, notFound(err, "account of token")
	}
	return a, nil
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
	res, err := d.db.ExecContext(ctx, `INSERT INTO repos (owner_id, name, created_at) VALUES (?, ?, ?)`,
		ownerID, name, ms(now))
	if err != nil {
		if isUnique(err) {
			return store.Repo{}, fmt.Errorf("repository %s: %w", name, store.ErrConflict)
		}
		return store.Repo{}, fmt.Errorf("insert repository %s: %w", name, err)
	}
	id, _ := res.LastInsertId()
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
