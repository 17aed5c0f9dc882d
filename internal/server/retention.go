package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// Retention removes the bytes of old runs: their step logs, line times and
// outputs archive. A run's record, result, steps and their states stay,
// and the run remembers when its bytes went (store.MarkRunExpired): the
// run page and the log API say "expired on DATE" instead of nothing.
//
// Which runs: those whose every set rule lets them go (store.ExpiryQuery;
// a repository's own rules, set by its owner, win over the server's),
// that ended (a run that has not ended is never listed: its writer is
// still writing) more than Grace ago. Where: one replica at a time, the
// one holding the retention lock (store.LockSweeper, id
// retentionLockID: the lease sweeper's space, its own id, so that the
// two sweeps never wait for each other), in batches of Batch runs a pass.
//
// A reader that holds a log or archive open when it goes keeps reading
// it to its end: removing unlinks the file, and POSIX keeps an unlinked
// file's bytes while it is open (NFS: the client that opened it renames
// it aside, .nfsXXXX, until it is closed; a reader on another replica
// of a shared directory gets ESTALE on its next read; one reading a
// moved log from the bucket may be cut short). The reader's next request
// is answered "expired". Retention takes runs days old, or at least Grace
// after their end: a reader is seldom there.

// Defaults of Retention.
const (
	// DefaultRetentionGrace is how long after a run's end its bytes stay
	// whatever the rules say: a runner's last log appends and outputs may
	// still arrive (a lost runner's, after its lease lapsed).
	DefaultRetentionGrace = time.Hour
	// DefaultRetentionEvery is the time between two passes.
	DefaultRetentionEvery = time.Minute
	// DefaultRetentionBatch is how many runs a pass measures, and how
	// many it expires, at most; a full batch brings the next pass
	// forward to a second later.
	DefaultRetentionBatch = 100
)

// retentionHook, when set (tests), is called with true once a pass holds
// the retention lock and with false before it lets it go.
var retentionHook atomic.Pointer[func(holding bool)]

// retentionLockID is the retention sweep's lock id in the LockSweeper
// space (the lease sweeper holds id 0, the object mover id 2).
const retentionLockID int32 = 1

// Retention is the server's retention of runs' logs and outputs
// (knotless-server --keep-logs-days, --keep-pipelines). The zero value
// keeps everything, and still measures what ended runs hold (for
// knotless repo usage).
type Retention struct {
	// KeepLogsDays removes a run's logs and outputs this many days
	// after its end; 0: not by age.
	KeepLogsDays int
	// KeepPipelines keeps the logs and outputs of the newest this many
	// pipelines of each branch (ref); 0: not by count. With both set, a
	// run's bytes go once both rules let them go.
	KeepPipelines int
	// Grace, Every and Batch: see DefaultRetention*. Zero takes those.
	Grace time.Duration
	Every time.Duration
	Batch int
}

func (r *Retention) fill() {
	if r.Grace <= 0 {
		r.Grace = DefaultRetentionGrace
	}
	if r.Every <= 0 {
		r.Every = DefaultRetentionEvery
	}
	if r.Batch <= 0 {
		r.Batch = DefaultRetentionBatch
	}
}

// Policy is r's two rules.
func (r Retention) Policy() store.RetentionPolicy {
	return store.RetentionPolicy{KeepLogsDays: r.KeepLogsDays, KeepPipelines: r.KeepPipelines}
}

// retentionState is a server's retention: its settings and its sweep.
type retentionState struct {
	mu   sync.Mutex // one pass at a time in this process
	cfg  Retention
	stop chan struct{}
	done chan struct{}
	// measuredBefore: every run that ended before it is measured, as of
	// this replica's last full scan (fullAt) and the passes since, which
	// look only from it (less a minute for clocks of other replicas).
	measuredBefore, fullAt time.Time
}

// fullMeasureEvery is how often the measuring pass looks at every ended
// run, not only those that ended since the last pass (runs another
// replica's pass left, a run whose end was recorded late).
const fullMeasureEvery = time.Hour

// retentionOf returns s's retention state, the zero settings until
// StartRetention.
func (s *Server) retentionOf() *retentionState { return s.retentionSt }

// retention returns the settings in effect, defaults filled in.
func (s *Server) retention() Retention {
	st := s.retentionOf()
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.cfg
	r.fill()
	return r
}

// StartRetention sets the server's retention and starts its sweep: a
// pass (ExpireRuns) every r.Every on the replica holding the retention
// lock, until stop or Close is called; either waits for a pass under way
// (Close before the store is closed). stop is idempotent.
// Calling StartRetention again replaces the settings and the sweep.
func (s *Server) StartRetention(r Retention) (stop func()) {
	r.fill()
	st := s.retentionOf()
	st.mu.Lock()
	if st.stop != nil {
		close(st.stop)
		st.mu.Unlock()
		<-st.done
		st.mu.Lock()
	}
	st.cfg = r
	stopc, done := make(chan struct{}), make(chan struct{})
	st.stop, st.done = stopc, done
	st.mu.Unlock()
	s.log.Info("retention of runs' logs and outputs", "keep_logs_days", r.KeepLogsDays, "keep_pipelines", r.KeepPipelines,
		"grace", r.Grace, "every", r.Every, "batch", r.Batch)
	go s.retain(r, stopc, done)
	var once sync.Once
	return func() {
		once.Do(func() {
			st.mu.Lock()
			if st.stop == stopc {
				close(stopc)
				st.stop = nil
			}
			st.mu.Unlock()
			<-done
		})
	}
}

// stopRetention ends the sweep StartRetention started, if any, and waits
// for it (Close).
func (s *Server) stopRetention() {
	st := s.retentionOf()
	st.mu.Lock()
	stopc, done := st.stop, st.done
	st.stop = nil
	st.mu.Unlock()
	if stopc != nil {
		close(stopc)
		<-done
	}
}

// retain runs passes until stop or the server closes.
func (s *Server) retain(r Retention, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTimer(r.Every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.closing:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		p, err := s.ExpireRuns(ctx, r)
		cancel()
		if err != nil {
			s.log.Warn("retention pass", "err", err)
		}
		next := r.Every
		if p.Measured == r.Batch || p.Expired+p.Failed == r.Batch {
			next = min(next, time.Second) // a backlog: the next batch soon
		}
		t.Reset(next)
	}
}

// RetentionPass is what one pass of ExpireRuns did.
type RetentionPass struct {
	// Leader: this replica held the retention lock and did the pass
	// (false: another replica holds it, nothing was done here).
	Leader bool
	// Measured runs had what they hold recorded; Expired runs had their
	// bytes removed and recorded so (a run another pass recorded first is
	// not counted); Failed runs could not be removed (tried again next
	// pass).
	Measured, Expired, Failed int
}

// ExpireRuns does one retention pass under the retention lock (with
// replicas, when another replica holds it, it does nothing and says so):
// it measures up to r.Batch runs that ended more than r.Grace ago, then
// removes the logs and outputs of up to r.Batch runs the rules let go
// (r's, or their repository's own), and records when. Safe to call
// concurrently (passes of one process take turns).
func (s *Server) ExpireRuns(ctx context.Context, r Retention) (RetentionPass, error) {
	r.fill()
	st := s.retentionOf()
	st.mu.Lock()
	defer st.mu.Unlock()
	var pass RetentionPass
	held, ok, err := s.retentionLock(ctx)
	if err != nil || !ok {
		return pass, err
	}
	defer held.Release()
	pass.Leader = true
	if h := retentionHook.Load(); h != nil {
		(*h)(true)
		defer (*h)(false)
	}
	now := s.now()
	if pass.Measured, err = s.measureEnded(ctx, st, now, now.Add(-r.Grace), r.Batch); err != nil {
		return pass, err
	}
	ids, err := s.store.ExpiryCandidates(ctx, store.ExpiryQuery{Server: r.Policy(), Now: now, EndedBefore: now.Add(-r.Grace), Limit: r.Batch})
	if err != nil {
		return pass, err
	}
	for _, id := range ids {
		if err := held.Held(ctx); err != nil {
			return pass, fmt.Errorf("retention stopped: %w", err)
		}
		marked, err := s.expireRun(ctx, id, now)
		if err != nil {
			pass.Failed++
			s.log.Warn("remove an expired run's logs and outputs; tried again next pass", "run", id, "err", err)
			continue
		}
		if marked {
			pass.Expired++
		}
	}
	if pass.Expired > 0 || pass.Failed > 0 {
		s.log.Info("retention pass", "expired", pass.Expired, "failed", pass.Failed, "measured", pass.Measured)
	}
	return pass, nil
}

// localLock is the retention lock of a server without replicas.
type localLock struct{}

func (localLock) Held(context.Context) error { return nil }
func (localLock) Release()                   {}

// retentionLock takes the retention lock when it is free: always, on a
// store without replicas.
func (s *Server) retentionLock(ctx context.Context) (store.Lock, bool, error) {
	if s.coord == nil {
		return localLock{}, true, nil
	}
	l, ok, err := s.coord.TryLock(ctx, store.LockSweeper, retentionLockID)
	if err != nil {
		return nil, false, fmt.Errorf("take the retention lock: %w", err)
	}
	return l, ok, nil
}

// expireRun removes run id's bytes, then records it (a crash between
// leaves the run listed again: removing is idempotent), and wakes its
// pages. marked is false when the run was recorded expired already.
func (s *Server) expireRun(ctx context.Context, id int64, now time.Time) (marked bool, err error) {
	if err := s.removeExpiredBytes(ctx, id); err != nil {
		return false, err
	}
	if marked, err = s.store.MarkRunExpired(ctx, id, now); err != nil {
		return false, err
	}
	if marked {
		s.log.Info("run's logs and outputs expired", "run", id)
		s.notify(runKey(id))
	}
	return marked, nil
}

// removeExpiredBytes is the one seam through which retention removes a
// run's bytes: removeRunBytes (objects.go) removes them from the data
// directory and, with an object store, from the bucket.
func (s *Server) removeExpiredBytes(ctx context.Context, run int64) error {
	return s.removeRunBytes(ctx, run)
}

// measureEnded records what up to limit runs that ended before
// endedBefore hold, and reports how many it measured. It looks at every
// ended run once every fullMeasureEvery, else only at those that ended
// since st.measuredBefore (the caller holds st.mu).
func (s *Server) measureEnded(ctx context.Context, st *retentionState, now, endedBefore time.Time, limit int) (int, error) {
	full := now.Sub(st.fullAt) >= fullMeasureEvery || st.measuredBefore.IsZero()
	from := time.Time{}
	if !full {
		from = st.measuredBefore.Add(-time.Minute)
	}
	ids, err := s.store.UnmeasuredRuns(ctx, from, endedBefore, limit)
	if err != nil {
		return 0, err
	}
	if len(ids) < limit { // all of them: the next pass looks from here
		st.measuredBefore = endedBefore
		if full {
			st.fullAt = now
		}
	}
	for i, id := range ids {
		b, err := s.measureRun(ctx, id)
		if err == nil {
			err = s.store.RecordRunBytes(ctx, b)
		}
		if err != nil {
			return i, fmt.Errorf("measure run %d: %w", id, err)
		}
	}
	return len(ids), nil
}

// measureRun returns what run's logs and outputs archive (its stored
// size) hold now: the logs moved to an object store as the move recorded
// them, else DATA/logs/<run>'s *.log and their *.times.
func (s *Server) measureRun(ctx context.Context, run int64) (store.RunBytes, error) {
	b := store.RunBytes{RunID: run, MeasuredAt: s.now()}
	moved, err := s.measureMoved(ctx, &b)
	if err != nil {
		return b, err
	}
	if !moved {
		if err := s.measureLocal(&b); err != nil {
			return b, err
		}
	}
	o, err := s.store.RunOutputs(ctx, run)
	switch {
	case err == nil:
		b.OutputsBytes = o.Size
	case !errors.Is(err, store.ErrNotFound):
		return b, err
	}
	return b, nil
}

// measureMoved adds the logs of b.RunID that the object store's move
// recorded, and reports whether there was a move.
func (s *Server) measureMoved(ctx context.Context, b *store.RunBytes) (bool, error) {
	objs, ok := s.store.(store.Objects)
	if !ok {
		return false, nil
	}
	m, err := objs.MovedRun(ctx, b.RunID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, l := range m.Logs {
		b.LogsBytes += l.Size + l.TimesSize
		b.Logs++
	}
	return true, nil
}

// measureLocal adds the logs of b.RunID in the data directory.
func (s *Server) measureLocal(b *store.RunBytes) error {
	ents, err := os.ReadDir(filepath.Join(s.logs.dir, strconv.FormatInt(b.RunID, 10)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".log") && !strings.HasSuffix(name, ".times") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		b.LogsBytes += fi.Size()
		if strings.HasSuffix(name, ".log") {
			b.Logs++
		}
	}
	return nil
}

// expiredAt returns when run's bytes expired; nil while kept.
func (s *Server) expiredAt(ctx context.Context, run int64) (*time.Time, error) {
	return s.store.RunExpiredAt(ctx, run)
}

// expiredDate is how the API and the pages write when bytes expired.
func expiredDate(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// logsExpired is the answer to a read of run's logs once they expired
// (410 Gone, api.ErrLogsExpired), nil while they are kept. getLog asks it
// before reading.
func (s *Server) logsExpired(ctx context.Context, run int64) error {
	return s.goneError(ctx, run, api.ErrLogsExpired, "logs")
}

// outputsExpired is logsExpired for run's outputs (api.ErrOutputsExpired).
func (s *Server) outputsExpired(ctx context.Context, run int64) error {
	return s.goneError(ctx, run, api.ErrOutputsExpired, "outputs")
}

func (s *Server) goneError(ctx context.Context, run int64, name, what string) error {
	at, err := s.expiredAt(ctx, run)
	if err != nil || at == nil {
		return err
	}
	repo := "OWNER/NAME"
	if r, err := s.store.Run(ctx, run); err == nil {
		repo = r.Repo
	}
	return xerr(http.StatusGone, name, "the %s of run %d expired on %s: retention removed them (knotless repo usage %s shows its rules)",
		what, run, expiredDate(*at), repo)
}

// unlessExpired is read (an XRPC handler of a run's logs or outputs, its
// run in the "run" parameter) answering gone's error instead once the
// run's bytes expired. A run the caller may not see is left to read,
// which refuses it as it always did: an expired run is no more visible
// than another.
func (s *Server) unlessExpired(gone func(context.Context, int64) error,
	read func(http.ResponseWriter, *http.Request, store.Account) error) func(http.ResponseWriter, *http.Request, store.Account) error {
	return func(w http.ResponseWriter, r *http.Request, a store.Account) error {
		id, err := requiredInt(r, "run")
		if err != nil || id <= 0 {
			return read(w, r, a)
		}
		if _, err := s.visibleRun(r.Context(), a, id); err != nil {
			return read(w, r, a)
		}
		if err := gone(r.Context(), id); err != nil {
			return err
		}
		return read(w, r, a)
	}
}
