package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/store"
)

// Finished logs and outputs in an object store (knotless-server
// --object-store, docs/storage.md). Live logs are written and followed in
// DATA/logs as ever; once a run has ended (and ObjectStore.Delay passed),
// the replica holding the mover's lock moves its step logs, their line
// times and its outputs archive to the bucket:
//
//	logs/<run>/<step>.log, logs/<run>/<step>.times, outputs/<run>/outputs.tar
//
// in three steps, each of which a crash may interrupt:
//
//  1. upload every file (an S3 object is visible only once whole; a
//     re-upload replaces it with the same bytes);
//  2. record the move in the database (store.Objects.RecordMoved: one
//     transaction, the run and all its logs);
//  3. after ObjectStore.RemoveAfter, remove the local files, then record
//     them removed (MarkCleaned).
//
// Readers open the local file first and, only when it is gone, look for
// the record (logFiles.size, openRange, lineTimes; serveOutputs), and
// open the object before they answer: a store that fails is a 503 with
// its reason, never a 200 cut short (sendLog, serveOutputs). The
// record is written before any local file is removed, so a reader finds
// the bytes in one place or the other, never half. A reader that opened
// the local file before its removal reads it to its end (POSIX keeps an
// open file's bytes until its last close; NFS does the same for a
// reader on the replica that removed it, by a silly rename, but a
// reader on another NFS client gets ESTALE once the file server frees
// it: RemoveAfter is what such a reader has to finish). Whoever held the
// lock and died leaves runs recorded but not cleaned, or ended but not
// recorded: the next holder's scans (a full one at start and every
// ObjectStore.FullEvery) finish both.

// Object names of a run's bytes in the bucket.
func logObject(run int64, step int) string {
	return "logs/" + strconv.FormatInt(run, 10) + "/" + strconv.Itoa(step) + ".log"
}

func timesObject(run int64, step int) string {
	return "logs/" + strconv.FormatInt(run, 10) + "/" + strconv.Itoa(step) + ".times"
}

func outputsObject(run int64) string { return "outputs/" + strconv.FormatInt(run, 10) + "/outputs.tar" }

// ObjectStore configures UseObjectStore. Zero fields take the defaults
// named.
type ObjectStore struct {
	// Bucket is where the bytes go (objstore.Open). Required.
	Bucket *objstore.Bucket
	// Every is how often the replica holding the mover's lock looks for
	// ended runs to move; default 5 s. While the store fails, passes back
	// off from 2×Every, doubling up to 5 min, until one succeeds.
	Every time.Duration
	// Delay is how long after its end a run is moved (a runner's append
	// in flight as the run ended still lands in DATA); default 10 s.
	Delay time.Duration
	// RemoveAfter is how long the local copies stay after the move is
	// recorded, for readers that opened them before (on NFS, readers on
	// other replicas need it); default 1 min.
	RemoveAfter time.Duration
	// FullEvery is how often a scan looks at every ended run, not only
	// those that ended since the last scan (moves another replica left
	// undone); default 10 min. The first scan after taking the lock is a
	// full one.
	FullEvery time.Duration
	// Batch is how many runs one database query lists; default 50.
	Batch int

	hook func(run int64, stage string) error // tests: stop a move after a stage
}

func (c *ObjectStore) fill() {
	if c.Every <= 0 {
		c.Every = 5 * time.Second
	}
	if c.Delay < 0 {
		c.Delay = 0
	} else if c.Delay == 0 {
		c.Delay = 10 * time.Second
	}
	if c.RemoveAfter < 0 {
		c.RemoveAfter = 0
	} else if c.RemoveAfter == 0 {
		c.RemoveAfter = time.Minute
	}
	if c.FullEvery <= 0 {
		c.FullEvery = 10 * time.Minute
	}
	if c.Batch <= 0 {
		c.Batch = 50
	}
}

// NoDelay is a Delay or RemoveAfter of none (zero takes the default).
const NoDelay = -1

// objects is a server's object store while it has one.
type objects struct {
	cfg      ObjectStore
	bucket   *objstore.Bucket
	db       store.Objects
	log      *slog.Logger
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	moved  atomic.Int64 // runs moved (recorded)
	failed atomic.Int64 // moves that failed (retried later)
}

// objectsRef is where logFiles and outputFiles find the object store:
// nil until UseObjectStore.
type objectsRef struct{ p atomic.Pointer[objects] }

func (r *objectsRef) get() *objects { return r.p.Load() }

// UseObjectStore makes the server move ended runs' step logs, line times
// and outputs into cfg.Bucket and read them from there (see the comment
// at the top of this file), from now on: it may be called while the
// server serves, once. It starts the mover, which runs on one replica at
// a time (a Coordinator lock) until stop or Close; stop waits for it to
// end. Errors: no Bucket, a store that cannot record moves (it is not a
// store.Objects), or a second call.
func (s *Server) UseObjectStore(cfg ObjectStore) (stop func(), err error) {
	if cfg.Bucket == nil {
		return nil, errors.New("object store: no bucket")
	}
	db, ok := s.store.(store.Objects)
	if !ok {
		return nil, fmt.Errorf("object store: the %s store cannot record moves to an object store", s.cfg.StoreName)
	}
	cfg.fill()
	o := &objects{cfg: cfg, bucket: cfg.Bucket, db: db, log: s.log.With("store", cfg.Bucket.String()),
		stop: make(chan struct{}), done: make(chan struct{})}
	if !s.logs.obj.p.CompareAndSwap(nil, o) {
		return nil, errors.New("object store: the server has one already")
	}
	s.outputs.obj.p.Store(o)
	go s.moveLoop(o)
	return func() { o.halt() }, nil
}

// halt ends the mover and waits for it; idempotent.
func (o *objects) halt() {
	o.stopOnce.Do(func() { close(o.stop) })
	<-o.done
}

// stopObjects ends the mover UseObjectStore started, if any (Close).
func (s *Server) stopObjects() {
	if o := s.logs.obj.get(); o != nil {
		o.halt()
	}
}

// ObjectMoves reports how many runs this process moved to the object
// store and how many moves failed (and were left for a later pass).
func (s *Server) ObjectMoves() (moved, failed int64) {
	o := s.logs.obj.get()
	if o == nil {
		return 0, 0
	}
	return o.moved.Load(), o.failed.Load()
}

// objectMoverLock is the mover's Coordinator lock: (LockSweeper, 2), a
// lock of its own beside the lease sweeper's (id 0) and retention's
// (retentionLockID, 1).
const objectMoverLock int32 = 2

// moveLoop runs move passes every cfg.Every while this replica holds the
// mover's lock, until o.stop or the server closes.
func (s *Server) moveLoop(o *objects) {
	defer close(o.done)
	t := time.NewTicker(o.cfg.Every)
	defer t.Stop()
	var held store.Lock
	defer func() {
		if held != nil {
			held.Release()
		}
	}()
	p := &movePass{}
	var backoff time.Duration // while passes fail for the store
	var next time.Time
	for {
		select {
		case <-o.stop:
			return
		case <-s.closing:
			return
		case <-t.C:
		}
		if time.Now().Before(next) {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-o.stop:
			case <-s.closing:
			case <-ctx.Done():
			}
			cancel()
		}()
		if held = s.holdMoverLock(ctx, held, p); held != nil || s.coord == nil {
			if f := s.movePass(ctx, o, p); f != nil {
				backoff = min(max(2*backoff, 2*o.cfg.Every), maxMoveBackoff)
				next = time.Now().Add(backoff)
				s.storeFailed(ctx, o, p, f, backoff)
			} else {
				backoff, next = 0, time.Time{}
			}
		}
		cancel()
	}
}

// maxMoveBackoff bounds the wait between the mover's passes while the
// store fails: from 2×ObjectStore.Every, doubled each failed pass.
const maxMoveBackoff = 5 * time.Minute

// waitingCap bounds the count of runs waiting for the store that a
// warning gives.
const waitingCap = 1000

// moveFailure is the store's failure that ended a pass: the run it
// failed to move, and why.
type moveFailure struct {
	run int64
	err error
}

// storeFailed logs once per failed pass (passes back off) that the store
// failed, with how many runs of the scan wait for it.
func (s *Server) storeFailed(ctx context.Context, o *objects, p *movePass, f *moveFailure, retryIn time.Duration) {
	waiting := "unknown"
	if ids, err := o.db.RunsToMove(ctx, p.after, p.from, p.to, waitingCap); err == nil {
		waiting = strconv.Itoa(len(ids))
		if len(ids) == waitingCap {
			waiting = "at least " + waiting
		}
	}
	o.log.Warn("the object store failed: ended runs' logs and outputs stay in the data directory until it answers",
		"run", f.run, "runs_waiting", waiting, "retry_in", retryIn, "err", f.err)
}

// holdMoverLock returns the mover's lock when this replica holds it
// (taking it when free), nil when another does; without replicas, nil.
// Losing or taking it resets p, so that the first pass is a full scan.
func (s *Server) holdMoverLock(ctx context.Context, held store.Lock, p *movePass) store.Lock {
	if s.coord == nil {
		return nil
	}
	if held != nil {
		if err := held.Held(ctx); err == nil {
			return held
		}
		held.Release()
	}
	l, ok, err := s.coord.TryLock(ctx, store.LockSweeper, objectMoverLock)
	if err != nil || !ok {
		return nil
	}
	*p = movePass{}
	s.log.Info("this replica moves ended runs' logs and outputs to the object store", "replica", s.replica)
	return l
}

// movePass is the mover's place in its scan of ended runs: runs that
// ended in [from, to) with ids above after. A scan ends when a query
// lists fewer than a batch; the next begins at the last one's to, less a
// minute (replicas' clocks), or at zero for a full scan; a scan that left
// a run unmoved is done again from the same from.
type movePass struct {
	after    int64
	from, to time.Time
	scanning bool
	full     time.Time // when the last full scan began
	failed   bool      // a run of this scan stays to move
	clean    map[int64]time.Time
}

// movePass moves what it can in one turn: the local copies due for
// removal, then batches of the current scan until it ends or the store
// fails (a store that fails is tried again next turn, from the same run).
// It returns the store's failure, nil when there was none.
func (s *Server) movePass(ctx context.Context, o *objects, p *movePass) *moveFailure {
	now := s.now()
	for run, due := range p.clean {
		if !now.Before(due) {
			if err := s.cleanMoved(ctx, o, run); err != nil {
				o.log.Warn("remove moved logs and outputs", "run", run, "err", err)
				continue
			}
			delete(p.clean, run)
		}
	}
	if !p.scanning {
		from := p.to.Add(-time.Minute)
		if p.failed {
			from = p.from
		}
		if p.to.IsZero() || now.Sub(p.full) >= o.cfg.FullEvery {
			from, p.full = time.Time{}, now
		}
		*p = movePass{from: from, to: now.Add(-o.cfg.Delay), scanning: true, full: p.full, clean: p.clean}
	}
	for ctx.Err() == nil {
		ids, err := o.db.RunsToMove(ctx, p.after, p.from, p.to, o.cfg.Batch)
		if err != nil {
			o.log.Warn("list runs to move to the object store", "err", err)
			return nil
		}
		for _, id := range ids {
			if err := s.moveRun(ctx, o, p, id); err != nil {
				o.failed.Add(1)
				if ctx.Err() != nil {
					return nil
				}
				var oe *objstore.Error
				if errors.As(err, &oe) {
					return &moveFailure{run: id, err: err} // again after a backoff, from this run
				}
				o.log.Warn("move a run's logs and outputs to the object store; it stays in the data directory, tried again later",
					"run", id, "err", err)
				p.failed = true
			}
			p.after = id
		}
		if len(ids) < o.cfg.Batch {
			p.scanning = false
			return nil
		}
	}
	return nil
}

// moveRun moves run's bytes (upload, record) or, when its move is
// recorded already, removes its local copies once due. Errors: the
// store's (*objstore.Error), the database's, or a local file's.
func (s *Server) moveRun(ctx context.Context, o *objects, p *movePass, run int64) error {
	m, err := o.db.MovedRun(ctx, run)
	switch {
	case err == nil:
		return s.cleanWhenDue(ctx, o, p, m)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	if m, err = s.uploadRun(ctx, o, run); err != nil {
		return err
	}
	if err := o.stage(run, "uploaded"); err != nil {
		return err
	}
	m.MovedAt = s.now()
	if err := o.db.RecordMoved(ctx, m); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	o.moved.Add(1)
	o.log.Info("run's logs and outputs moved to the object store", "run", run, "logs", len(m.Logs), "outputs", m.Outputs)
	if err := o.stage(run, "recorded"); err != nil {
		return err
	}
	return s.cleanWhenDue(ctx, o, p, m)
}

func (o *objects) stage(run int64, stage string) error {
	if o.cfg.hook == nil {
		return nil
	}
	return o.cfg.hook(run, stage)
}

// cleanWhenDue removes m's local copies now when RemoveAfter has passed
// since its move, else remembers to in p.
func (s *Server) cleanWhenDue(ctx context.Context, o *objects, p *movePass, m store.MovedRun) error {
	if m.Cleaned {
		return nil
	}
	due := m.MovedAt.Add(o.cfg.RemoveAfter)
	if s.now().Before(due) {
		if p.clean == nil {
			p.clean = map[int64]time.Time{}
		}
		p.clean[m.RunID] = due
		return nil
	}
	return s.cleanMoved(ctx, o, m.RunID)
}

// uploadRun uploads run's step logs, line times and outputs archive as
// they are in DATA, and returns the record of what it uploaded (MovedAt
// unset). A log file that is gone (removed meanwhile) is left out.
func (s *Server) uploadRun(ctx context.Context, o *objects, run int64) (store.MovedRun, error) {
	m := store.MovedRun{RunID: run}
	ents, err := os.ReadDir(filepath.Join(s.logs.dir, strconv.FormatInt(run, 10)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("list logs of run %d: %w", run, err)
	}
	for _, e := range ents {
		step, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".log"))
		if !strings.HasSuffix(e.Name(), ".log") || err != nil || step < 0 {
			continue
		}
		size, err := o.upload(ctx, s.logs.path(run, step), logObject(run, step), 1)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return m, err
		}
		times, err := o.upload(ctx, s.logs.timesPath(run, step), timesObject(run, step), api.LineTimeSize)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return m, err
		}
		m.Logs = append(m.Logs, store.MovedLog{Step: step, Size: size, TimesSize: times})
	}
	if _, err := s.store.RunOutputs(ctx, run); err == nil {
		_, err := o.upload(ctx, s.outputs.archive(run), outputsObject(run), 1)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return m, err
		}
		m.Outputs = err == nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return m, err
	}
	slices.SortFunc(m.Logs, func(a, b store.MovedLog) int { return a.Step - b.Step })
	return m, nil
}

// upload puts the file at path as the object name, its size rounded down
// to a multiple of unit (a torn line time record stays out), and returns
// that size; an empty file is not uploaded (size 0). Errors:
// fs.ErrNotExist when there is no file, the file's, the store's.
func (o *objects) upload(ctx context.Context, path, name string, unit int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size() - fi.Size()%unit
	if size == 0 {
		return 0, nil
	}
	if err := o.bucket.Put(ctx, name, io.NewSectionReader(f, 0, size), size, nil); err != nil {
		return 0, err
	}
	return size, nil
}

// cleanMoved removes the local copies of run's recorded move (its step
// logs and line times, its outputs archive, their directories when
// empty), then records them removed. Idempotent.
func (s *Server) cleanMoved(ctx context.Context, o *objects, run int64) error {
	m, err := o.db.MovedRun(ctx, run)
	if err != nil {
		return err
	}
	var paths []string
	for _, l := range m.Logs {
		paths = append(paths, s.logs.timesPath(run, l.Step), s.logs.path(run, l.Step))
	}
	if m.Outputs {
		paths = append(paths, s.outputs.archive(run))
	}
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	_ = os.Remove(filepath.Join(s.logs.dir, strconv.FormatInt(run, 10))) // only when empty
	_ = os.Remove(s.outputs.runDir(run))
	if err := o.stage(run, "removed"); err != nil {
		return err
	}
	return o.db.MarkCleaned(ctx, run)
}

// gone reports whether err says a local file is not there: it never was,
// it was removed, or (NFS) another client removed it under an open.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE)
}

// removeRunBytes removes run's step logs, their line times and its
// outputs archive from wherever they are: DATA/logs/<run>,
// DATA/outputs/<run> and, with an object store, the bucket's
// logs/<run>/ and outputs/<run>/ (listed, so that the objects of a move
// a crash left unrecorded go too); then it forgets the move's record.
// The database's other rows (the run, its steps, its outputs' entries)
// stay. For retention: the run must have ended (what a running run
// writes would be lost), and its move must not be under way (retention
// takes runs days old, the mover seconds old). A reader streaming a local
// file keeps its bytes (POSIX); one reading from the bucket may be cut.
// Idempotent: after an error, what was removed stays removed and a second
// call finishes. Errors: the file system's, the store's (described, one
// line), the database's.
func (s *Server) removeRunBytes(ctx context.Context, run int64) error {
	for _, dir := range []string{filepath.Join(s.logs.dir, strconv.FormatInt(run, 10)), s.outputs.runDir(run)} {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove the logs and outputs of run %d: %w", run, err)
		}
	}
	o := s.logs.obj.get()
	if o == nil {
		return nil
	}
	for _, prefix := range []string{"logs/" + strconv.FormatInt(run, 10) + "/", "outputs/" + strconv.FormatInt(run, 10) + "/"} {
		for info, err := range o.bucket.List(ctx, prefix) {
			if err != nil {
				return fmt.Errorf("list the objects of run %d: %w", run, err)
			}
			if err := o.bucket.Remove(ctx, info.Name); err != nil {
				return fmt.Errorf("remove the objects of run %d: %w", run, err)
			}
		}
	}
	return o.db.ForgetMoved(ctx, run)
}

// unlinked reports whether fi, of an open file, says its last name was
// removed (POSIX: link count 0; an NFS client's silly rename keeps 1).
func unlinked(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}
