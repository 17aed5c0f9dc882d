package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"testing/fstest"
	"time"

	_ "modernc.org/sqlite"

	"knotless.dev/knotless/internal/store"
)

// A transaction that collides with others (a retryable error: PostgreSQL's
// serialization failure) on every attempt is run maxTxAttempts times, with
// waits that grow, and then fails with an error wrapping store.ErrBusy
// (the server answers it 503 with Retry-After) and the last collision.
// Pins: 82 of 10,000 runners registering 8 at a time on two replicas on
// PostgreSQL were refused "500 internal error": the 20 attempts' waits
// (under 2 ms × attempt) were shorter than the collisions lasted, and the
// last error was not told apart from a fault.
func TestTx_ATransactionThatCollidesEveryTimeEndsInErrBusyAfterGrowingWaits(t *testing.T) {
	ctx := context.Background()
	raw, err := sql.Open("sqlite", "file:"+t.TempDir()+"/t.db")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	collision := errors.New("could not serialize access (SQLSTATE 40001)")
	d, err := New(ctx, raw, Dialect{Name: "test", Retryable: func(err error) bool { return errors.Is(err, collision) }}, fstest.MapFS{})
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	t0 := time.Now()
	err = d.tx(ctx, func(querier) error { attempts++; return collision })
	took := time.Since(t0)
	if !errors.Is(err, store.ErrBusy) || !errors.Is(err, collision) {
		t.Fatalf("tx = %v, want store.ErrBusy wrapping the collision", err)
	}
	if attempts != maxTxAttempts {
		t.Errorf("%d attempts, want %d", attempts, maxTxAttempts)
	}
	// The waits are random below 2 ms, 4 ms, ... up to maxTxBackoff: their
	// sum's expectation is about 1.3 s; under 400 ms means they did not
	// grow (below 2 ms × attempt, as before, they summed to about 0.2 s).
	if took < 400*time.Millisecond {
		t.Errorf("the %d attempts took %s: the waits between them did not grow", attempts, took)
	}
	// Any other error ends the transaction at once, as itself.
	attempts = 0
	other := errors.New("disk on fire")
	if err := d.tx(ctx, func(querier) error { attempts++; return other }); !errors.Is(err, other) || errors.Is(err, store.ErrBusy) || attempts != 1 {
		t.Errorf("another error: tx = %v after %d attempts, want it as is after 1", err, attempts)
	}
}
