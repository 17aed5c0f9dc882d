package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"knotless.dev/knotless/internal/store"
)

// Channel is the LISTEN/NOTIFY channel of the replicas of one database.
const Channel = "knotless"

// Notify implements store.Coordinator with pg_notify.
func (d *DB) Notify(ctx context.Context, payload string) error {
	if _, err := d.SQL().ExecContext(ctx, `SELECT pg_notify($1, $2)`, Channel, payload); err != nil {
		return fmt.Errorf("notify replicas: %w", err)
	}
	return nil
}

// Listen implements store.Coordinator on a connection of its own.
func (d *DB) Listen(ctx context.Context, resync func(), deliver func(payload string)) error {
	pause := 100 * time.Millisecond
	for {
		err := d.listen(ctx, resync, deliver)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = err // the connection dropped: connect again, after a pause
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

func (d *DB) listen(ctx context.Context, resync func(), deliver func(string)) error {
	conn, err := pgx.ConnectConfig(ctx, d.cfg.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	resync()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		deliver(n.Payload)
	}
}

// Lock implements store.Coordinator with a session advisory lock held on
// a connection of its own.
func (d *DB) Lock(ctx context.Context, space, id int32) (store.Lock, error) {
	conn, err := pgx.ConnectConfig(ctx, d.cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("lock %d/%d: %w", space, id, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, space, id); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("lock %d/%d: %w", space, id, err)
	}
	return &advisoryLock{conn: conn}, nil
}

// TryLock implements store.Coordinator.
func (d *DB) TryLock(ctx context.Context, space, id int32) (store.Lock, bool, error) {
	conn, err := pgx.ConnectConfig(ctx, d.cfg.Copy())
	if err != nil {
		return nil, false, fmt.Errorf("lock %d/%d: %w", space, id, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, space, id).Scan(&ok); err != nil || !ok {
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return nil, false, fmt.Errorf("lock %d/%d: %w", space, id, err)
		}
		return nil, false, nil
	}
	return &advisoryLock{conn: conn}, true, nil
}

// advisoryLock is held as long as its connection is open: closing the
// connection releases it, as does the connection's loss.
type advisoryLock struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

func (l *advisoryLock) Held(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return errors.New("lock released")
	}
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("the connection holding the lock broke: %w", err)
	}
	return nil
}

// Release unlocks before it closes the connection: the database frees a
// closed connection's locks only once its backend has exited, after
// Close returned, and a TryLock just after a Release found the lock
// still held (TestCoordinator_NotifyReachesListenersAndLocksAreExclusive,
// on a busy machine).
func (l *advisoryLock) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
		l.conn.Close(ctx)
		l.conn = nil
	}
}
