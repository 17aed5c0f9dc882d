package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/runlog"
)

// errTransfer marks a log transfer cut off mid-body; following retries it.
var errTransfer = errors.New("log transfer interrupted")

// transient reports whether err may pass on its own: the server is
// unreachable, restarting, failing (5xx, 429), slow, or a transfer broke.
func transient(err error) bool {
	var ee *exitError
	if errors.As(err, &ee) {
		return false
	}
	if errors.Is(err, errTimedOut) || errors.Is(err, errTransfer) {
		return true
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return api.Retryable(ae)
	}
	var ue *url.Error
	return errors.As(err, &ue) && !errors.Is(err, context.Canceled)
}

// retrier repeats calls that fail transiently, for up to followRetryFor of
// consecutive failure, telling the user once on stderr.
type retrier struct {
	s       *session
	failing bool
	since   int64 // unix nanoseconds of the first failure in a row
	attempt int
}

func (rt *retrier) do(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			if rt.failing {
				fmt.Fprintln(rt.s.stderr(), "knotless: the server answers again, following on")
			}
			rt.failing, rt.attempt = false, 0
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !transient(err) {
			return err
		}
		now := rt.s.now().UnixNano()
		if !rt.failing {
			rt.failing, rt.since = true, now
			why := oneLine(err.Error())
			if cause, ok := transportCause(err); ok {
				why = "cannot reach the server at " + rt.s.server + ": " + cause
			}
			fmt.Fprintf(rt.s.stderr(), "knotless: %s; retrying for up to %s\n", why, followRetryFor)
		} else if now-rt.since > int64(followRetryFor) {
			return err
		}
		if err := sleep(ctx, api.Backoff(rt.attempt, 5*pollInterval)); err != nil {
			return err
		}
		rt.attempt++
	}
}

// followRun prints the logs of run id as they grow, step after step, until
// the run is final and every log is done; then the summary line. only ≥ 0
// follows just that step, without the summary. It returns the run as last
// seen and whether it (or the one step) succeeded.
func (s *session) followRun(ctx context.Context, id int64, only int) (api.Run, bool, error) {
	rt := &retrier{s: s}
	var run api.Run
	refresh := func() error {
		return rt.do(ctx, func() error {
			r, err := s.getRun(ctx, id)
			if err == nil {
				run = r
			}
			return err
		})
	}
	if err := refresh(); err != nil {
		return run, false, err
	}
	if run.State == api.StateQueued {
		if run.Message != "" {
			// The server says why no runner takes it (none approved, none
			// with the labels, all busy).
			fmt.Fprintf(s.stderr(), "Run %d is queued: %s\n", id, run.Message)
		} else {
			fmt.Fprintf(s.stderr(), "Run %d is queued: waiting for a runner to claim it (see knotless runner list --repo %s).\n", id, run.Repo)
		}
	}

	if only >= 0 {
		ok, err := s.followOnlyStep(ctx, rt, &run, refresh, id, only)
		return run, ok, err
	}

	last := -1
	var setupOffset int64
	var deferred []api.Step // detached steps still running when reached
	for {
		next, ok := api.Step{}, false
		for _, st := range sortedSteps(run) {
			if st.Index > last {
				next, ok = st, true
				break
			}
		}
		if ok {
			off, err := s.followStep(ctx, rt, &run, refresh, next, false, 0)
			if errors.Is(err, errDetachedStep) {
				// A service: its log comes once it has ended.
				deferred = append(deferred, next)
				last = next.Index
				continue
			}
			if err != nil {
				return run, false, err
			}
			if next.Index == api.SetupStep {
				setupOffset = off
			}
			last = next.Index
			continue
		}
		if api.IsFinal(run.State) {
			break
		}
		// The run goes on but lists no further step yet.
		if err := sleep(ctx, pollInterval); err != nil {
			return run, false, err
		}
		if err := refresh(); err != nil {
			return run, false, err
		}
	}
	for _, st := range deferred {
		if _, err := s.followStep(ctx, rt, &run, refresh, st, false, 0); err != nil {
			return run, false, err
		}
	}
	// The runner may have added to the setup log after the steps began
	// (e.g. cleaning up); print what came after what was shown.
	if setup, ok := stepOf(run, api.SetupStep); ok && last > api.SetupStep {
		if _, err := s.followStep(ctx, rt, &run, refresh, setup, false, setupOffset); err != nil {
			return run, false, err
		}
	}
	fmt.Fprint(s.stdout(), runlog.RunSummary(run))
	return run, run.State == api.StateSucceeded, nil
}

// followOnlyStep follows step only of run id (run logs --step), once the
// run lists it, and says whether it succeeded; refresh updates *run.
func (s *session) followOnlyStep(ctx context.Context, rt *retrier, run *api.Run, refresh func() error, id int64, only int) (bool, error) {
	for {
		st, ok := stepOf(*run, only)
		if ok {
			if _, err := s.followStep(ctx, rt, run, refresh, st, true, 0); err != nil {
				return false, err
			}
			st, _ = stepOf(*run, only)
			return st.State == api.StepSucceeded, nil
		}
		if api.IsFinal(run.State) {
			return false, noStepError(id, only, workflowSteps(*run))
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return false, err
		}
		if err := refresh(); err != nil {
			return false, err
		}
	}
}

// followStep prints one step's log as it grows, framed by header and
// footer, and returns when the log is done. A server that never says a log
// is done is covered too: once the step (or the run) is final, or for the
// setup log once a later step started, one more quiet poll ends it. The
// setup log's frame is printed only when it has bytes, unless force. It
// starts at byte offset and returns the offset it reached.
func (s *session) followStep(ctx context.Context, rt *retrier, run *api.Run, refresh func() error, st api.Step, force bool, offset int64) (int64, error) {
	sw := &stepWriter{w: s.stdout()}
	head := runlog.StepHeader(st.Index, max(workflowSteps(*run), st.Index), st.Name)
	lazy := st.Index == api.SetupStep && !force
	if lazy {
		sw.header = head
	} else {
		io.WriteString(s.stdout(), head)
	}
	ending := false // the step or run is final: the next quiet poll ends the log
	for {
		wait := logWait
		if st.Index == api.SetupStep || offset == 0 {
			// The server calls the setup log done only when the run ends,
			// and a step starting does not wake this poll: look often. So
			// for a step with no output yet: it may be a detached one,
			// seen as such only once a later step has started.
			wait = setupWait
		}
		if ending {
			wait = 1
		}
		start := s.now()
		var n, size int64
		var done bool
		err := rt.do(ctx, func() error {
			k, sz, d, err := s.fetchLog(ctx, sw, run.ID, st.Index, offset, wait)
			offset += k
			n += k
			size, done = sz, d
			if api.IsError(err, api.ErrNotFound) {
				size, done = -1, false // no log yet
				return nil
			}
			return err
		})
		if err != nil {
			return offset, err
		}
		if done && (size < 0 || offset >= size) {
			break
		}
		if n > 0 && (ending || st.Index != api.SetupStep) {
			continue
		}
		if n == 0 && ending {
			break
		}
		if err := refresh(); err != nil {
			return offset, err
		}
		cur, _ := stepOf(*run, st.Index)
		if !force && offset == 0 && st.Index > api.SetupStep && cur.State == api.StepRunning && !api.IsFinal(run.State) && laterStepAfter(*run, st.Index) {
			// Only a detached step (detach: true) runs while a later
			// step does; the runner sends its log when it ends.
			io.WriteString(s.stdout(), "[knotless: this step runs beside the next ones (detach: true); its log follows once it has ended]\n")
			return offset, errDetachedStep
		}
		ending = api.IsFinal(run.State) || stepDone(cur.State) || (st.Index == api.SetupStep && laterStepStarted(*run))
		if d := pollInterval - s.now().Sub(start); d > 0 && !ending && n == 0 {
			if err := sleep(ctx, d); err != nil {
				return offset, err
			}
		}
	}
	if err := refresh(); err != nil {
		return offset, err
	}
	cur, ok := stepOf(*run, st.Index)
	if !ok {
		cur = st
	}
	s.endStep(sw, cur, run.State, !lazy)
	return offset, nil
}

// errDetachedStep ends the following of a step that runs beside later
// ones (detach: true): its log is printed once it has ended.
var errDetachedStep = errors.New("a detached step: its log comes when it ends")

// laterStepAfter reports whether a step of r after idx has left pending.
func laterStepAfter(r api.Run, idx int) bool {
	for _, st := range r.Steps {
		if st.Index > idx && st.State != api.StepPending && st.State != "" {
			return true
		}
	}
	return false
}

// laterStepStarted reports whether a workflow step of r has left pending.
func laterStepStarted(r api.Run) bool {
	for _, st := range r.Steps {
		if st.Index > api.SetupStep && st.State != api.StepPending && st.State != "" {
			return true
		}
	}
	return false
}
