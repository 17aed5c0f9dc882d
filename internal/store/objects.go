package store

import (
	"context"
	"time"
)

// Objects is what the server records of the ended runs' logs and outputs
// it moved to an object store (knotless-server --object-store, issue 36;
// internal/server/objects.go). A moved run's row is written once every
// object of it is whole in the bucket, in one transaction with its logs'
// rows: a reader that finds no local file looks here, and only here, to
// know that the bytes are in the bucket. Every method may be called
// concurrently, by any replica.
type Objects interface {
	// RunsToMove lists, ascending, at most limit ids above after of runs
	// that ended (their finished time set) in [from, to) and whose bytes
	// are not both moved and cleaned (no MovedRun, or one not Cleaned).
	RunsToMove(ctx context.Context, after int64, from, to time.Time, limit int) ([]int64, error)
	// RecordMoved records, in one transaction, that m.RunID's outputs
	// (when m.Outputs) and logs (m.Logs, one per step log) are in the
	// bucket, not cleaned (m.Cleaned is ignored). ErrConflict when the run
	// is recorded already; ErrNotFound when there is no such run.
	RecordMoved(ctx context.Context, m MovedRun) error
	// MovedRun returns what RecordMoved recorded of run, its Logs by step
	// ascending; ErrNotFound when nothing.
	MovedRun(ctx context.Context, run int64) (MovedRun, error)
	// MovedLog returns the record of one step's log of a moved run;
	// ErrNotFound when that log is not in the bucket.
	MovedLog(ctx context.Context, run int64, step int) (MovedLog, error)
	// MarkCleaned records that run's local copies are removed
	// (idempotent; no error when run is not recorded).
	MarkCleaned(ctx context.Context, run int64) error
	// ForgetMoved deletes the records of run (its bytes were removed from
	// the bucket); idempotent.
	ForgetMoved(ctx context.Context, run int64) error
}

// MovedRun is a run whose ended logs and outputs the server moved to its
// object store.
type MovedRun struct {
	RunID   int64
	Outputs bool       // its outputs archive is in the bucket
	Logs    []MovedLog // by step, ascending
	MovedAt time.Time  // when the move was recorded
	Cleaned bool       // its local copies are removed
}

// MovedLog is one step log of a MovedRun.
type MovedLog struct {
	Step      int
	Size      int64 // bytes of the log
	TimesSize int64 // bytes of its line times (api.LineTimeSize each); 0: none
}
