package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/workflow"
)

// Defaults of Config, also printed by `knotless-run run --help`.
const (
	DefaultCapacity     = 1
	DefaultStopWait     = 10 * time.Minute
	DefaultClaimWait    = 30 * time.Second
	DefaultHeartbeat    = 2 * time.Second
	DefaultShipWait     = 30 * time.Second
	DefaultApprovalPoll = 5 * time.Second
)

// ErrNotRegistered is matched (errors.Is) by Run's error when the server
// does not know the runner's identity: it was removed there (knotless
// runner remove), or registered with another server or data directory. Run
// has logged what to do; the runner must log in anew.
var ErrNotRegistered = errors.New("this runner is not registered on the server")

// Config configures a Runner. Zero durations and sizes mean the defaults
// above.
type Config struct {
	State *State // identity and server, from LoadState
	// StatePath is the state file State was read from, for the commands
	// the runner's messages suggest ("" shows FILE).
	StatePath string
	Executor  executor.Executor // where runs execute
	WorkDir   string            // --work DIR (see the package doc for its layout)
	Capacity  int               // runs at once
	// StopWait is how long a stopping runner lets running runs finish
	// before it cancels them (reason runner-stopped).
	StopWait time.Duration
	// LogLimit caps each step's log in bytes (DefaultLogLimit).
	LogLimit int64
	// Env holds variables the operator gives every step (--env), e.g. a
	// shared GOCACHE; the workflow's own variables win over them.
	Env map[string]string
	// ClaimWait is how long one claim long-polls.
	ClaimWait time.Duration
	// Heartbeat is the interval of lease renewals, which also carry cancels.
	Heartbeat time.Duration
	// ShipWait bounds how long a stopping runner keeps delivering spools;
	// what is left is delivered by the next start.
	ShipWait time.Duration
	// ApprovalPoll is the wait between claims while the runner is not
	// approved yet.
	ApprovalPoll time.Duration
	// Grace is a cancelled step's SIGTERM-to-SIGKILL wait (0: executor's).
	Grace time.Duration
	// CacheSize bounds the cache store (WorkDir/caches) in bytes, with
	// LRU eviction; 0 means cache.DefaultSize.
	CacheSize int64
	// CacheOptions are the cache store's settings beyond CacheSize: the
	// shared bucket (--cache-store) and retention (--cache-unused-days,
	// --cache-repo-size).
	CacheOptions cache.Options
	// MaxBackoff caps retry waits after errors; 0 means 15 s.
	MaxBackoff time.Duration
	HTTP       *http.Client
	Logger     *slog.Logger
	// Metrics, when set, counts what the runner does (NewMetrics).
	Metrics *Metrics
}

// Runner claims runs from its server and executes them.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	client  *api.RunnerClient
	mirrors *Mirrors
	caches  *cache.Store // opened by Run, under the work directory's lock
	// workspaces hands out the runs' stable checkout paths.
	workspaces *workspaces

	shippers sync.WaitGroup
	hurry    chan struct{} // closed by StopNow
	hurryMu  sync.Once

	// unknown is closed when the server answered 401 InvalidToken (to a
	// claim or a heartbeat): it does not know this runner; unknownErr is
	// that answer.
	unknown     chan struct{}
	unknownOnce sync.Once
	unknownErr  error

	sess *session // this process's runner session (session.go)

	handover     chan struct{} // closed by Handover
	handoverOnce sync.Once
}

// Handover makes Run hand its runs over to the next knotless-run process
// on the same work directory and return: it stops claiming, lets go of
// every run's environment (their steps go on), tells the server (which
// keeps the runs' leases for its handover grace), and returns nil without
// cancelling anything or waiting for deliveries; the next process takes
// the runs over and delivers what is left. Safe to call at any time and
// more than once.
func (r *Runner) Handover() {
	r.handoverOnce.Do(func() { close(r.handover) })
}

// refused records that the server does not know this runner (err is its
// answer); the claim loop stops. Safe to call concurrently and repeatedly.
func (r *Runner) refused(err error) {
	r.unknownOnce.Do(func() {
		r.unknownErr = err
		close(r.unknown)
	})
}

// StopNow makes a stopping runner cancel its running runs at once instead
// of waiting for StopWait (a second SIGTERM). Safe to call at any time and
// more than once; it has effect once Run's context has ended.
func (r *Runner) StopNow() {
	r.hurryMu.Do(func() { close(r.hurry) })
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Runner, error) {
	if cfg.State == nil || cfg.Executor == nil || cfg.WorkDir == "" {
		return nil, errors.New("runner: State, Executor and WorkDir are required")
	}
	abs, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	cfg.WorkDir = abs
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	def(&cfg.StopWait, DefaultStopWait)
	def(&cfg.ClaimWait, DefaultClaimWait)
	def(&cfg.Heartbeat, DefaultHeartbeat)
	def(&cfg.ShipWait, DefaultShipWait)
	def(&cfg.ApprovalPoll, DefaultApprovalPoll)
	def(&cfg.MaxBackoff, 15*time.Second)
	if cfg.LogLimit <= 0 {
		cfg.LogLimit = DefaultLogLimit
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Runner{
		cfg:        cfg,
		log:        log.With("runner", cfg.State.Name),
		sess:       newSession(),
		handover:   make(chan struct{}),
		client:     api.NewRunnerClient(cfg.State.Client(cfg.HTTP)),
		mirrors:    &Mirrors{Root: filepath.Join(abs, "mirrors")},
		workspaces: &workspaces{root: filepath.Join(abs, "workspaces")},
		hurry:      make(chan struct{}),
		unknown:    make(chan struct{}),
	}, nil
}

func (r *Runner) path(parts ...string) string {
	return filepath.Join(append([]string{r.cfg.WorkDir}, parts...)...)
}

// Run claims and executes runs until ctx ends, then stops gracefully: it
// claims no more, lets running runs finish for up to StopWait, cancels the
// rest (cancelled/runner-stopped), and keeps delivering spools for up to
// ShipWait. It returns nil after a graceful stop, an error when it cannot
// start (work directory in use or unusable), and an error matching
// ErrNotRegistered when the server refuses the runner's identity on a claim
// or a heartbeat (401 InvalidToken: the runner was removed): then it logs what to do,
// cancels its running runs at once (their heartbeats and results are
// refused too) and stops without waiting for deliveries the server refuses.
// Before claiming it starts a runner session (session.go); an error
// matching ErrSuperseded when another process took that session over.
func (r *Runner) Run(ctx context.Context) error {
	go selfDigest() // read meanwhile: the session start sends it
	unlock, err := r.prepareWorkDir(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	// The store's sweep (saves a killed process left) needs the lock.
	if r.caches, err = cache.Open(r.path("caches"), r.cfg.CacheSize, r.log); err != nil {
		return fmt.Errorf("%w (--work holds the cache store; --cache-size bounds it)", err)
	}
	r.caches.Configure(r.cfg.CacheOptions)

	held, err := r.startSession(ctx)
	if err != nil || ctx.Err() != nil {
		return err
	}
	r.endUnknownRuns(ctx, held)

	shipCtx, stopShipping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopShipping()
	takeovers := r.recoverSpools(shipCtx, held)
	r.cleanWorkDir(ctx, takeovers)

	runsCtx, stopRuns := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopRuns(ErrRunnerStopped)
	var active sync.WaitGroup
	slots := make(chan struct{}, r.cfg.Capacity)
	for _, t := range takeovers {
		active.Add(1)
		took := false
		select { // a taken-over run holds a slot when one is free
		case slots <- struct{}{}:
			took = true
		default:
		}
		go func() {
			defer active.Done()
			if took {
				defer func() { <-slots }()
			}
			r.takeOver(runsCtx, shipCtx, t)
		}()
	}

	r.log.Info("runner started", "server", r.cfg.State.Server, "repo", r.cfg.State.Repo,
		"executor", r.cfg.Executor.Name(), "capacity", r.cfg.Capacity, "work", r.cfg.WorkDir)
	// The claim loop also ends when a heartbeat finds the runner unknown:
	// with every slot busy it is not claiming, so it would not find out.
	claimCtx, stopClaiming := context.WithCancel(ctx)
	defer stopClaiming()
	go func() {
		select {
		case <-r.unknown:
			stopClaiming()
		case <-r.sess.superseded:
			stopClaiming()
		case <-r.handover:
			stopClaiming()
		case <-claimCtx.Done():
		}
	}()
	r.claimLoop(claimCtx, slots, func(cr *api.ClaimedRun) {
		active.Add(1)
		go func() {
			defer active.Done()
			defer func() { <-slots }()
			r.handle(runsCtx, shipCtx, cr)
		}()
	})

	return r.stop(&active, slots, stopShipping, stopRuns)
}

// stop ends Run once the claim loop returned: it waits for the active
// runs (or hands them over, or cancels them after Config.StopWait, at
// once when hurried), then for their spools' delivery (Config.ShipWait).
// Its error says why the runner stops when it is not a plain stop
// (ErrNotRegistered, ErrSuperseded).
func (r *Runner) stop(active *sync.WaitGroup, slots chan struct{}, stopShipping context.CancelFunc, stopRuns context.CancelCauseFunc) error {
	done := make(chan struct{})
	go func() { active.Wait(); close(done) }()
	if len(slots) == 0 && !isClosed(r.handover) { // the claim loop has returned its own slot
		<-done
	}
	if isClosed(r.handover) {
		return r.stopHandingOver(done, stopShipping)
	}
	if isClosed(r.sess.superseded) {
		return r.stopSuperseded(done, stopShipping, stopRuns)
	}
	if isClosed(r.unknown) {
		return r.stopNotRegistered(done, slots, stopShipping, stopRuns)
	}
	select {
	case <-done:
	default:
		r.log.Info("stopping: letting running runs finish", "runs", len(slots), "stop_wait", r.cfg.StopWait)
		select {
		case <-done:
		case <-time.After(r.cfg.StopWait):
			r.log.Warn("stop wait is over: cancelling running runs", "reason", api.ReasonRunnerStopped)
			stopRuns(ErrRunnerStopped)
			<-done
		case <-r.hurry:
			r.log.Warn("told to stop now: cancelling running runs", "reason", api.ReasonRunnerStopped)
			stopRuns(ErrRunnerStopped)
			<-done
		case <-r.sess.superseded:
			return r.stopSuperseded(done, stopShipping, stopRuns)
		case <-r.handover:
			return r.stopHandingOver(done, stopShipping)
		}
	}
	shipped := make(chan struct{})
	go func() { r.shippers.Wait(); close(shipped) }()
	select {
	case <-shipped:
	case <-time.After(r.cfg.ShipWait):
		r.log.Warn("stopping with undelivered spools; the next start delivers them", "spool", r.path("spool"))
		stopShipping()
		<-shipped
	}
	r.log.Info("runner stopped")
	if isClosed(r.sess.superseded) { // said so while delivering
		return fmt.Errorf("%w: %v", ErrSuperseded, r.sess.err)
	}
	return nil
}

// stopNotRegistered stops a runner the server no longer knows: running
// runs are cancelled (cancelled/runner-stopped), their spools stay.
func (r *Runner) stopNotRegistered(done <-chan struct{}, slots chan struct{}, stopShipping context.CancelFunc, stopRuns context.CancelCauseFunc) error {
	claimErr := r.unknownErr
	r.logNotRegistered(claimErr)
	select {
	case <-done:
	default:
		r.log.Warn("cancelling running runs: the server refuses this runner", "runs", len(slots), "reason", api.ReasonRunnerStopped)
		stopRuns(errNotRegisteredStop)
		<-done
	}
	stopShipping()
	r.shippers.Wait()
	if n := r.spoolCount(); n > 0 {
		r.log.Warn("undelivered logs and results stay in the spool: the server refuses them from this runner", "runs", n, "spool", r.path("spool"))
	}
	r.log.Info("runner stopped")
	return fmt.Errorf("%w: %v", ErrNotRegistered, claimErr)
}

// logNotRegistered says what to do when the server does not know this
// runner (err is its answer).
func (r *Runner) logNotRegistered(err error) {
	r.log.Error(fmt.Sprintf("this runner is not registered on %s (removed?): run %s, have an owner approve it again, then restart knotless-run run",
		r.cfg.State.Server, r.cfg.State.LoginCommand(r.cfg.StatePath)), "did", r.cfg.State.DID, "err", err)
}

// prepareWorkDir creates the work directory and takes its lock. What an
// earlier process left is dealt with once the server said which runs this
// runner still holds (recoverSpools, cleanWorkDir).
func (r *Runner) prepareWorkDir(ctx context.Context) (func(), error) {
	for _, d := range []string{"", "mirrors", "runs", "spool"} {
		if err := os.MkdirAll(r.path(d), 0o700); err != nil {
			return nil, fmt.Errorf("create work directory: %w", err)
		}
	}
	lf, err := os.OpenFile(r.path(".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock work directory: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("work directory %s is in use by another knotless-run process: %w", r.cfg.WorkDir, err)
	}
	unlock := func() {
		// LOCK_UN first: a child forked at this moment shares the open
		// file description until it execs.
		_ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
		lf.Close()
	}
	return unlock, nil
}

// ship starts delivering sp; the channel it returns closes when the
// shipper has stopped (spool delivered, or ctx ended).
func (r *Runner) ship(ctx context.Context, sp *logship.Spool) <-chan struct{} {
	sh := &logship.Shipper{Client: r.client, Spool: sp, Log: r.log, MaxBackoff: r.cfg.MaxBackoff}
	done := make(chan struct{})
	r.shippers.Add(1)
	go func() {
		defer r.shippers.Done()
		defer close(done)
		if err := sh.Run(ctx); err != nil && ctx.Err() == nil && !r.superseded(err) {
			r.log.Error("shipping stopped", "run", sp.Run(), "err", err)
		}
	}()
	return done
}

// spoolCount is how many runs' spools are in the work directory.
func (r *Runner) spoolCount() int {
	ents, err := os.ReadDir(r.path("spool"))
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			n++
		}
	}
	return n
}

// claimLoop long-polls for runs while a slot is free, until ctx ends or
// the server answers a claim with 401 InvalidToken: it does not know this
// runner (recorded with refused). Each claim asks for as many runs as
// slots are free (at least one, at most api.MaxClaimRuns), so a burst of
// queued runs fills them in one answer, and start is called for every run
// of the answer, each holding one of those slots; the slots left over are
// given back.
func (r *Runner) claimLoop(ctx context.Context, slots chan struct{}, start func(*api.ClaimedRun)) {
	failures := 0
	approvalLogged := time.Time{}
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		free := 1
	more:
		for free < api.MaxClaimRuns {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		runs, err := r.claim(ctx, free)
		for _, cr := range runs {
			start(cr)
		}
		for range free - len(runs) {
			<-slots
		}
		if len(runs) > 0 {
			r.log.Debug("claim answered", "runs", len(runs), "free_slots", free)
			if err != nil { // the server answered more runs than asked for
				r.log.Error("the claim's answer held more runs than free slots", "err", err)
			}
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case err == nil:
			failures = 0
			continue
		case isUnknownRunner(err):
			r.refused(err)
			return
		case r.superseded(err):
			return
		case api.IsError(err, api.ErrNotApproved):
			if time.Since(approvalLogged) > time.Minute {
				r.log.Warn("waiting for approval: ask an owner to run: " + r.cfg.State.ApproveCommand())
				approvalLogged = time.Now()
			}
			wait = r.cfg.ApprovalPoll
		case api.Retryable(err):
			wait = api.RetryWait(failures, err, r.cfg.MaxBackoff)
			failures++
			r.log.Warn("claim failed, will retry", "err", err, "retry", failures, "wait", wait)
		default:
			wait = max(r.cfg.MaxBackoff, 30*time.Second)
			r.log.Error("claim refused", "err", err, "wait", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// isUnknownRunner reports whether a claim's error says the server does
// not know the runner's identity: 401 InvalidToken (an expired token,
// ExpiredToken, is a clock problem and is retried).
func isUnknownRunner(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Status == http.StatusUnauthorized && e.Name == api.ErrInvalidToken
}

// claim long-polls for up to n runs (the free slots) for Config.ClaimWait.
func (r *Runner) claim(ctx context.Context, n int) ([]*api.ClaimedRun, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.ClaimWait+30*time.Second)
	defer cancel()
	runs, err := r.client.ClaimRuns(cctx, r.cfg.ClaimWait, n)
	r.cfg.Metrics.claimed(len(runs) > 0, err)
	return runs, err
}

// handle executes one claimed run and starts shipping its spool.
func (r *Runner) handle(runsCtx, shipCtx context.Context, cr *api.ClaimedRun) {
	run := cr.Run
	log := r.log.With("run", run.ID)
	log.Info("claimed run", "repo", run.Repo, "workflow", run.WorkflowPath, "sha", run.SHA, "ref", run.Ref)

	sp, err := logship.CreateSpool(r.path("spool"), run.ID)
	if err != nil {
		log.Error("cannot record the run; reporting it errored", "err", err)
		ctx, cancel := context.WithTimeout(shipCtx, 30*time.Second)
		defer cancel()
		_ = r.client.Complete(ctx, api.CompleteInput{Run: run.ID, State: api.StateErrored,
			Reason: api.ReasonExecutor, Message: "the runner could not create the run's spool: " + err.Error(), EnvironmentRemoved: true})
		return
	}
	workspace := r.workspaces.take(run.Repo, run.WorkflowPath)
	rec := &logship.ClaimRecord{Run: run, WorkflowSource: cr.WorkflowSource, GitURL: cr.GitURL, Workspace: workspace, Started: time.Now()}
	if err := sp.Append(logship.JournalEntry{Claim: rec}); err != nil {
		log.Warn("could not record the claim: a restarted runner cannot take this run over", "err", err)
	}
	r.execute(runsCtx, shipCtx, sp, cr, workspace, nil)
}

// execute runs a claimed run, or one taken over from an earlier process
// (resume set), recording it into sp, and ships sp. workspace is the
// run's checkout (held in r.workspaces; let go of here).
func (r *Runner) execute(runsCtx, shipCtx context.Context, sp *logship.Spool, cr *api.ClaimedRun, workspace string, resume *Resume) {
	run := cr.Run
	log := r.log.With("run", run.ID)
	delivered := r.ship(shipCtx, sp)

	ctx, cancel := context.WithCancelCause(runsCtx)
	defer cancel(nil)
	if cr.CancelRequested {
		cancel(ErrCancelled)
	}
	// The lease is renewed until the result is delivered, not only while
	// the steps execute: a result spooled while the server was down must
	// not find the run taken for lost when the server is back.
	executed := make(chan struct{})
	every := r.cfg.Heartbeat
	if lease := time.Duration(cr.LeaseSeconds) * time.Second; lease > 0 && lease/3 < every {
		every = lease / 3
	}
	r.shippers.Add(1)
	go func() {
		defer r.shippers.Done()
		r.heartbeat(shipCtx, run.ID, every, cancel, executed, delivered)
	}()

	runDir := r.path("runs", strconv.FormatInt(run.ID, 10))
	removed, handedOver := false, false
	removeWorkspace := func() error {
		removed = true
		err := cleanup.RemoveAll(workspace, log)
		if err2 := cleanup.RemoveAll(runDir, log); err == nil {
			err = err2
		}
		return err
	}
	defer func() {
		if !removed {
			if err := removeWorkspace(); err != nil {
				log.Error("remove workspace", "err", err)
			}
		}
		if !handedOver {
			r.workspaces.release(workspace)
		}
	}()
	if resume == nil || resume.Session == nil {
		// Setup starts (over): a new checkout in a clean workspace, at
		// the same path as the last run's of this repository and workflow.
		for _, d := range []string{runDir, workspace} {
			if err := cleanup.RemoveAll(d, log); err != nil {
				log.Error("clean the workspace", "dir", d, "err", err)
			}
		}
	}
	for _, d := range []string{runDir, filepath.Dir(workspace)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			log.Error("create run directory", "dir", d, "err", err)
		}
	}
	job := r.job(cr, workspace, runDir, removeWorkspace)
	job.Resume, job.Handover = resume, r.handover
	var rep Reporter = SpoolReporter{Spool: sp}
	if r.cfg.Metrics != nil {
		rep = observedReporter{SpoolReporter{Spool: sp}, r.cfg.Metrics}
	}
	if res := Execute(ctx, job, r.cfg.Executor, rep); res.State == "" {
		removed = true // handed over: the successor's steps use the workspace
		handedOver = true
	}
	close(executed)
}

// job is the Job of a claimed run cr: the claim's run, workflow, secrets
// and needs; this runner's environment, limits, cache store and executor
// labels; the checkout into workspace through the mirrors; the outputs
// copied under runDir; removeWorkspace as its Cleanup.
func (r *Runner) job(cr *api.ClaimedRun, workspace, runDir string, removeWorkspace func() error) Job {
	run := cr.Run
	job := Job{
		Run:            run.ID,
		Pipeline:       run.Pipeline,
		Repo:           run.Repo,
		Ref:            run.Ref,
		SHA:            run.SHA,
		Event:          run.Event,
		BeforeSHA:      run.BeforeSHA,
		Actor:          run.Actor,
		ServerURL:      strings.TrimRight(r.cfg.State.Server, "/"),
		RunnerName:     r.cfg.State.Name,
		WorkflowPath:   run.WorkflowPath,
		WorkflowSource: []byte(cr.WorkflowSource),
		Workspace:      workspace,
		Env:            r.cfg.Env,
		Secrets:        cr.SecretValues(),
		IDTokens:       ServerIDTokens(r.client, run.ID, r.cfg.MaxBackoff),
		Labels:         map[string]string{"knotless.dev/run": strconv.FormatInt(run.ID, 10), "knotless.dev/runner": r.cfg.State.Name},
		LogLimit:       r.cfg.LogLimit,
		Grace:          r.cfg.Grace,
		Logger:         r.log,
		OutputsDir:     filepath.Join(runDir, "outputs"),
		Caches:         r.caches,
		Cleanup:        removeWorkspace,
		Checkout: func(ctx context.Context, c workflow.Checkout, w io.Writer) error {
			return r.mirrors.Checkout(ctx, Fetch{
				Repo: run.Repo, URL: strings.TrimRight(r.cfg.State.Server, "/") + cr.GitURL, SHA: run.SHA, Token: cr.RunToken,
				Ref: run.Ref, Checkout: c,
			}, workspace, w)
		},
	}
	job.Matrix, job.Needs, job.Attempt = run.Matrix, cr.Needs, run.Attempt
	job.NeedOutputs = func(ctx context.Context, need int64) (io.ReadCloser, error) {
		body, _, err := r.client.NeedOutputs(ctx, run.ID, need)
		return body, err
	}
	return job
}

// heartbeat renews run's lease every interval (Config.Heartbeat, or a third
// of the server's lease if that is shorter) until delivered closes (the
// shipper has delivered the result, or stopped) or ctx (the shipping
// context) ends. While the run executes, a cancel from the server cancels
// it (ErrCancelled) and a run the server ended already is stopped
// (ErrRunFinished); once executed is closed, a final run ends the heartbeat.
func (r *Runner) heartbeat(ctx context.Context, run int64, every time.Duration, cancel context.CancelCauseFunc, executed, delivered <-chan struct{}) {
	log := r.log.With("run", run)
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	cancelled := false
	for {
		select {
		case <-delivered:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, hcancel := context.WithTimeout(ctx, max(r.cfg.Heartbeat*5, 10*time.Second))
		out, err := r.client.Heartbeat(hctx, run)
		hcancel()
		switch {
		case err == nil:
			if failing {
				log.Info("heartbeats get through again")
				failing = false
			}
			if out.Cancel && !cancelled && !isClosed(executed) {
				cancelled = true
				log.Info("cancel requested: stopping the run")
				cancel(ErrCancelled)
			}
		case api.IsError(err, api.ErrRunFinished) || api.IsError(err, api.ErrNotFound):
			if isClosed(executed) {
				return // the result is in (or the server decided): nothing left to renew
			}
			if !cancelled {
				cancelled = true
				log.Warn("the server ended the run already: stopping it here", "err", err)
				cancel(ErrRunFinished)
			}
		case isUnknownRunner(err):
			// The runner was removed: nothing this process sends is taken
			// any more. Run cancels the runs and stops.
			if !isClosed(r.unknown) {
				log.Warn("heartbeat refused: the server does not know this runner", "err", err)
			}
			r.refused(err)
			return
		case r.superseded(err):
			return // another process owns the run now: Run stops it
		default:
			if !failing {
				log.Warn("heartbeat failed; the lease may lapse if this lasts", "err", err)
				failing = true
			}
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
