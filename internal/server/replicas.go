package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/svcauth"
)

// Several replicas on one PostgreSQL database (docs/scaling.md) share
// everything through it: rows, and a store.Coordinator's notifications
// and locks. What one process held in memory and the others must see goes
// through here:
//
//   - wake-ups: s.notify(key) wakes this replica's waiters of key (a run's
//     log followers, a runner's long polls) and, through NOTIFY, every
//     other replica's; s.offer(runs) offers queued runs to this replica's
//     waiting claims and tells the others to offer them to theirs;
//   - the lease sweeper runs on the one replica holding store.LockSweeper;
//   - a repository's pushes are serialized by store.LockRepoPush;
//   - runner tokens' jti values are recorded in the database (replayCache).
//
// With SQLite there is no Coordinator: one process, and all of the above
// stays in its memory (coord is nil).

// newReplicaID returns an id for this process among the replicas: 8
// random bytes in hex.
func newReplicaID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Payloads of notifications between replicas: "REPLICA KIND ID".
const (
	noteKey       = "key"       // ID is a hub key: notify it
	noteQueued    = "queued"    // ID is a repository: offer its queued runs
	noteSchedules = "schedules" // ID is a repository whose schedules changed: look for the next due time
)

// notify wakes the waiters of key on every replica.
func (s *Server) notify(key string) {
	s.hub.notify(key)
	s.publish(noteKey, key)
}

// offer offers queued runs to the waiting claims of every replica.
func (s *Server) offer(runs []store.Run) {
	s.claims.offer(runs)
	repos := map[int64]bool{}
	for _, r := range runs {
		if !repos[r.RepoID] {
			repos[r.RepoID] = true
			s.publish(noteQueued, strconv.FormatInt(r.RepoID, 10))
		}
	}
}

func (s *Server) publish(kind, id string) {
	if s.coord == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.coord.Notify(ctx, s.replica+" "+kind+" "+id); err != nil {
		s.log.Warn("notify the other replicas", "what", kind+" "+id, "err", err)
	}
}

// listen delivers the other replicas' notifications until ctx ends.
func (s *Server) listen(ctx context.Context) {
	defer close(s.listenDone)
	_ = s.coord.Listen(ctx, s.resync, func(payload string) {
		from, rest, _ := strings.Cut(payload, " ")
		kind, id, _ := strings.Cut(rest, " ")
		if from == s.replica {
			return // done locally already
		}
		switch kind {
		case noteKey:
			s.hub.notify(id)
		case noteQueued:
			repo, err := strconv.ParseInt(id, 10, 64)
			if err == nil && s.claims.waiting(repo) {
				s.offerQueued(ctx, repo)
			}
		case noteSchedules:
			s.wakeSchedules()
		}
	})
}

// resync runs when this replica (re)starts listening: notifications sent
// meanwhile are lost, so every waiter looks again.
func (s *Server) resync() {
	s.hub.notifyAll()
	s.wakeSchedules()
	for _, repo := range s.claims.waitingRepos() {
		s.offerQueued(context.Background(), repo)
	}
}

func (s *Server) offerQueued(ctx context.Context, repo int64) {
	queued, err := s.store.QueuedRuns(ctx, repo)
	if err != nil {
		s.log.Warn("read queued runs for waiting runners", "repo", repo, "err", err)
		return
	}
	s.claims.offer(queued)
}

// lockRepo serializes the pushes of repository id across replicas: this
// process's lock first (one database connection per repository at most),
// then the database's.
func (s *Server) lockRepo(ctx context.Context, id int64) (unlock func(), err error) {
	local := s.repoMu.lock(id)
	if s.coord == nil {
		return local, nil
	}
	l, err := s.coord.Lock(ctx, store.LockRepoPush, int32(id))
	if err != nil {
		local()
		return nil, err
	}
	return func() { l.Release(); local() }, nil
}

// sweeperLease reports whether this replica is the one that sweeps now,
// taking the lock when it is free and checking that it still holds it.
type sweeperLease struct {
	s    *Server
	held store.Lock
}

func (l *sweeperLease) leading(ctx context.Context) bool {
	if l.s.coord == nil {
		return true
	}
	if l.held != nil {
		if err := l.held.Held(ctx); err == nil {
			return true
		} else {
			l.s.log.Warn("lost the lease sweeper's lock; another replica sweeps", "err", err)
		}
		l.held.Release()
		l.held = nil
	}
	lock, ok, err := l.s.coord.TryLock(ctx, store.LockSweeper, 0)
	if err != nil {
		l.s.log.Warn("take the lease sweeper's lock", "err", err)
		return false
	}
	if ok {
		l.held = lock
		l.s.log.Info("this replica sweeps lapsed leases", "replica", l.s.replica)
		l.s.metrics.sweeperLeader.Set(1)
	}
	return ok
}

func (l *sweeperLease) release() {
	if l.held != nil {
		l.held.Release()
		l.held = nil
	}
	l.s.metrics.sweeperLeader.Set(0)
}

// replayCache is a svcauth.ReplayCache in two layers: this replica's
// memory, which bounds what one client makes it hold (the per-replica
// limits of ClientLimits) and refuses a replay to this replica at once,
// then the database, which every replica sees and which survives a
// restart.
type replayCache struct {
	mem   svcauth.ReplayCache
	store store.Store
}

func (c replayCache) Record(issuer, jti string, exp time.Time) error {
	if err := c.mem.Record(issuer, jti, exp); err != nil {
		return err
	}
	h := sha256.New()
	h.Write([]byte(issuer))
	h.Write([]byte{0})
	h.Write([]byte(jti))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.store.RecordJTI(ctx, hex.EncodeToString(h.Sum(nil)), exp)
	if errors.Is(err, store.ErrConflict) {
		return svcauth.ErrReplayed
	}
	return err
}

// staleSpool is how old another replica's spool directory must be for the
// sweeper to remove it: its replica died (no push spools for a day).
const staleSpool = 24 * time.Hour

// pruneTmp removes what replicas that died left in DATA/tmp (each spools
// into DATA/tmp/REPLICA and empties only its own at start): the
// directories of others untouched for staleSpool. On SQLite the one
// process empties DATA/tmp at start (cleanTmp) and this does nothing.
func (s *Server) pruneTmp() {
	if s.coord == nil {
		return
	}
	dir := filepath.Dir(s.tmpDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || e.Name() == s.replica || time.Since(fi.ModTime()) < staleSpool {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			s.log.Warn("remove a dead replica's spools", "path", filepath.Join(dir, e.Name()), "err", err)
		}
	}
}
