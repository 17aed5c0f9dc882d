package store

import "context"

// Coordinator is what a database offers several server replicas beside
// its rows: notifications that reach every replica, and locks that one
// replica at a time holds. A Store that is also a Coordinator (postgres)
// can be shared by replicas; without one (sqlite) the server keeps both
// in its own memory and must be the only process on its database.
type Coordinator interface {
	// Notify sends payload (at most 7,000 bytes) to every replica's Listen,
	// this one's included. A notification sent inside no transaction is
	// delivered after the changes made before it are visible.
	Notify(ctx context.Context, payload string) error
	// Listen delivers each notification's payload to deliver, in the order
	// sent, until ctx ends (it returns ctx's error). It reconnects when its
	// connection drops, with a growing pause; notifications sent while it
	// was not listening are lost, so it calls resync after each connect:
	// the caller must look again at whatever it waits for.
	Listen(ctx context.Context, resync func(), deliver func(payload string)) error
	// Lock waits until this process holds the lock (space, id) among all
	// replicas, or ctx ends. TryLock takes it only if it is free. A lock
	// is held until Release, or until the connection holding it drops
	// (its process died): the database then frees it.
	Lock(ctx context.Context, space, id int32) (Lock, error)
	TryLock(ctx context.Context, space, id int32) (l Lock, ok bool, err error)
}

// Lock is a lock a Coordinator gave.
type Lock interface {
	// Held reports an error when the lock may have been lost (its
	// connection broke): the holder must stop acting under it.
	Held(ctx context.Context) error
	// Release frees the lock (idempotent).
	Release()
}

// Lock spaces: what a Coordinator lock's first number means.
const (
	LockSweeper    int32 = 1 // the lease sweeper: id 0
	LockRepoPush   int32 = 2 // a repository's pushes: id = the repository's id
	LockMigrations int32 = 3 // applying migrations: id 0
	LockSetup      int32 = 4 // first start (the admin account): id 0
)
