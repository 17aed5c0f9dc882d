package sqlstore

import (
	"context"
	"fmt"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// heldRuns lists the runs runner id holds (claimed or running), oldest
// first.
func heldRuns(ctx context.Context, q querier, id int64) ([]store.Run, error) {
	return listRuns(ctx, q, `WHERE r.runner_id = ? AND r.state IN (?, ?) ORDER BY r.id`,
		id, api.StateClaimed, api.StateRunning)
}

// setHeldLeases sets the lease of every run runner id holds to until.
func setHeldLeases(ctx context.Context, tx querier, id int64, until time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE runs SET lease_expires = ? WHERE runner_id = ? AND state IN (?, ?)`,
		ms(until), id, api.StateClaimed, api.StateRunning); err != nil {
		return fmt.Errorf("renew leases of runner %d's runs: %w", id, err)
	}
	return nil
}

// StartSession implements store.Store.
func (d *DB) StartSession(ctx context.Context, id int64, session string, now, leaseUntil time.Time) (store.Runner, []store.Run, error) {
	var prev store.Runner
	var held []store.Run
	err := d.tx(ctx, func(tx querier) error {
		var err error
		if prev, err = getRunner(ctx, tx, `x.id = ?`, id); err != nil {
			return notFound(err, fmt.Sprintf("runner %d", id))
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runners SET session = ?, session_started_at = ?,
			handed_over_at = NULL, handover_until = NULL WHERE id = ?`, session, ms(now), id); err != nil {
			return fmt.Errorf("start session of runner %d: %w", id, err)
		}
		if err := setHeldLeases(ctx, tx, id, leaseUntil); err != nil {
			return err
		}
		held, err = heldRuns(ctx, tx, id)
		return err
	})
	return prev, held, err
}

// HandOver implements store.Store.
func (d *DB) HandOver(ctx context.Context, id int64, session string, now, until time.Time) ([]store.Run, error) {
	var held []store.Run
	err := d.tx(ctx, func(tx querier) error {
		x, err := getRunner(ctx, tx, `x.id = ?`, id)
		if err != nil {
			return notFound(err, fmt.Sprintf("runner %d", id))
		}
		if !x.SessionOpen(session) {
			return fmt.Errorf("hand over session of runner %d: not its open session: %w", id, store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE runners SET handed_over_at = ?, handover_until = ? WHERE id = ?`,
			ms(now), ms(until), id); err != nil {
			return fmt.Errorf("hand over session of runner %d: %w", id, err)
		}
		if err := setHeldLeases(ctx, tx, id, until); err != nil {
			return err
		}
		held, err = heldRuns(ctx, tx, id)
		return err
	})
	return held, err
}
