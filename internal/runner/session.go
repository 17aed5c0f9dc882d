package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/version"
)

// ErrSuperseded is matched (errors.Is) by Run's error when another
// knotless-run process started with this runner's identity (the same state
// file) and the server gave it the runner's session: this process stopped
// claiming and stopped its runs without reporting them, since they belong
// to the new process now. Run has logged it; the program exits.
var ErrSuperseded = errors.New("another knotless-run process took this runner over")

// errSupersededStop is the cause runs are stopped with when the session
// was superseded; nothing of it reaches the server (shipping stops first).
var errSupersededStop = fmt.Errorf("%w: another knotless-run process took this runner over", ErrRunnerStopped)

// lostRunMessage is the result message of a run the server says this
// runner holds but of which this work directory has no spool.
const lostRunMessage = "the runner process that ran it is gone and left no record of it in this work directory (was it started with another --work?)"

// session is this process's runner session (api.MethodStartSession):
// whether the server said a newer session superseded it. The session's id
// travels with every call through api.RunnerClient. Safe for concurrent use.
type session struct {
	superseded chan struct{} // closed once the server answered SessionSuperseded
	once       sync.Once
	err        error // that answer
}

func newSession() *session { return &session{superseded: make(chan struct{})} }

// superseded reports whether err is the server's SessionSuperseded answer
// and, the first time, logs it: then the claim loop and Run stop (see
// stopSuperseded). Safe to call concurrently and repeatedly.
func (r *Runner) superseded(err error) bool {
	if !api.IsError(err, api.ErrSessionSuperseded) {
		return false
	}
	r.sess.once.Do(func() {
		r.sess.err = err
		path := r.cfg.StatePath
		if path == "" {
			path = "FILE"
		}
		r.log.Error("another knotless-run process started with this runner's identity (the same state file, "+path+
			") and took it over: this process stops, and stops its running runs without reporting them (a process on another work directory cannot take them over; the new one ends them); run one process per state file",
			"err", err)
		close(r.sess.superseded)
	})
	return true
}

// startSession opens this process's session with the server, retrying
// while the server is unreachable (one log line per outage) and while the
// runner awaits approval, and returns the runs the server says the runner
// holds. It returns nil, nil when ctx ends first, an error matching
// ErrNotRegistered when the server does not know the runner (logged), and
// an error when the server has no sessions or refuses for another reason.
func (r *Runner) startSession(ctx context.Context) ([]api.HeldRun, error) {
	in := api.StartSessionInput{Version: version.Version, Executor: r.cfg.Executor.Name(), Digest: digestWithin(digestWait),
		Capacity: r.cfg.Capacity}
	if f, ok := r.cfg.Executor.(executor.Facter); ok {
		in.Facts = f.Facts()
	}
	failures := 0
	var approvalLogged time.Time
	for {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		out, err := r.client.StartSession(cctx, in)
		cancel()
		if err == nil {
			if failures > 0 {
				r.log.Info("the server answers again", "after_retries", failures)
			}
			r.log.Info("runner session started", "held_runs", len(out.Runs), "lease_seconds", out.LeaseSeconds,
				"handover_grace_seconds", out.HandoverGraceSeconds)
			return out.Runs, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		var wait time.Duration
		switch {
		case isUnknownRunner(err):
			r.logNotRegistered(err)
			return nil, fmt.Errorf("%w: %v", ErrNotRegistered, err)
		case api.IsError(err, api.ErrNotApproved):
			if time.Since(approvalLogged) > time.Minute {
				r.log.Warn("waiting for approval: ask an owner to run: " + r.cfg.State.ApproveCommand())
				approvalLogged = time.Now()
			}
			wait = r.cfg.ApprovalPoll
		case api.IsError(err, api.ErrNotImplemented):
			return nil, fmt.Errorf("the server at %s has no runner sessions (%v): upgrade knotless-server to this knotless-run's version (%s) or newer",
				r.cfg.State.Server, err, version.Version)
		case api.Retryable(err):
			if failures == 0 {
				r.log.Warn("cannot start a runner session: the server does not answer; retrying until it does", "err", err)
			}
			wait = api.RetryWait(failures, err, r.cfg.MaxBackoff)
			failures++
		default:
			wait = max(r.cfg.MaxBackoff, 30*time.Second)
			r.log.Error("the server refuses to start a runner session", "err", err, "wait", wait)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
	}
}

// endUnknownRuns records, for each run the server says this runner holds
// but of which the work directory keeps no spool (the process that ran it
// used another work directory, or lost it), the result errored/runner-lost
// (cancelled, when a cancel was requested) in a new spool, which
// recoverSpools then delivers like any other. With an executor that can
// find the run's environment by itself (adopt.go), the run's spool is
// rebuilt from the server's record instead, and the run taken over.
func (r *Runner) endUnknownRuns(ctx context.Context, held []api.HeldRun) {
	for _, h := range held {
		dir := r.path("spool", strconv.FormatInt(h.Run, 10))
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, os.ErrNotExist) {
			continue // a spool of ours (recoverSpools takes it), or unreadable: leave it
		}
		if r.adoptWithoutSpool(ctx, h) {
			continue
		}
		res := Result{State: api.StateErrored, Reason: api.ReasonRunnerLost, Message: lostRunMessage}
		if h.CancelRequested {
			res = Result{State: api.StateCancelled, Reason: api.ReasonCancelled, Message: "cancelled; " + lostRunMessage}
		}
		sp, err := logship.CreateSpool(r.path("spool"), h.Run)
		if err == nil {
			err = SpoolReporter{Spool: sp}.Done(res)
			sp.Close()
		}
		if err != nil {
			r.log.Error("record the end of a run this work directory knows nothing of; its lease will lapse", "run", h.Run, "err", err)
			continue
		}
		r.log.Warn("the server says this runner holds a run this work directory knows nothing of: ending it",
			"run", h.Run, "state", res.State, "reason", res.Reason)
	}
}

// stopSuperseded stops Run after the server said another process took the
// runner over: shipping stops first, so nothing more about the runs
// reaches the server (they are the new process's), then running runs are
// stopped at once, or, with an executor whose environments the other
// process adopts (executor.Finder), let go of (detached, as on a
// handover); their spools stay on disk. It returns the error Run
// returns, matching ErrSuperseded.
func (r *Runner) stopSuperseded(done <-chan struct{}, stopShipping context.CancelFunc, stopRuns context.CancelCauseFunc) error {
	stopShipping()
	select {
	case <-done:
	default:
		if _, adopts := r.cfg.Executor.(executor.Finder); adopts {
			// The other process finds the environments and adopts them
			// (adopt.go): stopping them would kill its runs.
			r.log.Warn("letting go of running runs without reporting them: the other process adopts their environments")
			r.Handover()
		} else {
			r.log.Warn("stopping running runs without reporting them: the other process owns them now")
			stopRuns(errSupersededStop)
		}
		<-done
	}
	r.shippers.Wait()
	r.log.Info("runner stopped")
	return fmt.Errorf("%w: %v", ErrSuperseded, r.sess.err)
}
