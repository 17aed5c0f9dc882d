package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/workflow"
)

// service is a detached step (`detach: true`) running beside the steps
// after it.
type service struct {
	idx  int
	st   workflow.Step
	name string
}

// serviceStopGrace is how long a service has between SIGTERM and SIGKILL
// at the run's end when the runner sets no Grace.
const serviceStopGrace = 10 * time.Second

// startService starts step idx detached. It returns the step's final
// update and the run's result when the step could not start (which ends
// the run).
func (e *execution) startService(ctx context.Context, sess executor.Session, idx int, st workflow.Step) (StepUpdate, Result, bool) {
	name := stepName(st, idx-1)
	log := e.log.With("step", idx, "name", name)
	// Each reason (unsupported, executor, workflow-invalid) makes the run errored.
	fail := func(reason string, err error) (StepUpdate, Result, bool) {
		fmt.Fprintf(e.setup, "step %d (%s) could not be started: %v\n", idx, name, err)
		e.setup.flush()
		return StepUpdate{Step: idx, Name: name, State: api.StepErrored, Reason: reason},
			Result{State: api.StateErrored, Reason: reason, Message: firstLine(err.Error())}, true
	}
	ds, ok := sess.(executor.DetachedSteps)
	if !ok {
		return fail(api.ReasonUnsupported, fmt.Errorf("the %s executor cannot run detached steps", e.ex.Name()))
	}
	start := time.Now()
	e.reportStep(StepUpdate{Step: idx, Name: name, State: api.StepRunning, At: start})
	e.stepRan = true
	tokens, failed, res := e.stepTokens(ctx, idx, st, name, start)
	if failed != nil {
		return *failed, res, true
	}
	// Notes of buildStep (a missing secret) go to the setup log: the
	// step's own log is written once, when it ends.
	xs, problem := e.buildStep(sess, st, name, e.setup, tokens)
	if problem != nil {
		return fail(api.ReasonWorkflowInvalid, problem)
	}
	xs.ID = strconv.Itoa(idx)
	if err := ds.StartDetached(ctx, xs); err != nil {
		return fail(api.ReasonExecutor, err)
	}
	log.Info("detached step started: it runs beside the next steps until the run's end")
	e.services = append(e.services, service{idx: idx, st: st, name: name})
	return StepUpdate{}, Result{}, false
}

// checkServices collects every service that ended on its own (before the
// run's end) and reports it. A failed one (not continue-on-error) ends
// the run: its result is returned.
func (e *execution) checkServices(ctx context.Context, sess executor.Session) (Result, bool) {
	ds, _ := sess.(executor.DetachedSteps)
	if ds == nil {
		return Result{}, false
	}
	var res Result
	failed := false
	live := e.services[:0]
	for _, svc := range e.services {
		running, err := ds.DetachedRunning(ctx, strconv.Itoa(svc.idx))
		if err == nil && running {
			live = append(live, svc)
			continue
		}
		upd, r, fails := e.collectService(ctx, sess, svc, false)
		e.reportStep(upd)
		if fails && !failed {
			res, failed = r, true
		}
	}
	e.services = live
	return res, failed
}

// stopServices stops every service still running (SIGTERM, SIGKILL after
// the grace), writes each one's log and reports it: stopped at the run's
// end is how a service is meant to end (succeeded). It returns the result
// of the first one that failed before it was stopped.
func (e *execution) stopServices(ctx context.Context, sess executor.Session) (Result, bool) {
	if len(e.services) == 0 {
		return Result{}, false
	}
	ds := sess.(executor.DetachedSteps)
	// Stopping and collecting must happen also when the run was cancelled
	// or timed out: its log would be lost otherwise.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	grace := e.job.Grace
	if grace <= 0 {
		grace = serviceStopGrace
	}
	for _, svc := range e.services {
		if err := ds.StopDetached(sctx, strconv.Itoa(svc.idx), grace); err != nil {
			e.log.Warn("stop detached step", "step", svc.idx, "err", err)
		}
	}
	var res Result
	failed := false
	for _, svc := range e.services {
		upd, r, fails := e.collectService(sctx, sess, svc, ctx.Err() != nil)
		e.reportStep(upd)
		if fails && !failed {
			res, failed = r, true
		}
	}
	e.services = nil
	return res, failed
}

// collectService attaches to a service that ended or is ending, writes its
// whole output to its log and returns its final update and, when it
// failed, the run's result. runStopped says the run itself was cancelled
// or timed out: the service is then reported cancelled.
func (e *execution) collectService(ctx context.Context, sess executor.Session, svc service, runStopped bool) (StepUpdate, Result, bool) {
	log := e.log.With("step", svc.idx, "name", svc.name)
	start := time.Now()
	out, err := e.stepLog(svc.idx, nil)
	if err != nil {
		log.Error("open step log", "err", err)
		return StepUpdate{Step: svc.idx, Name: svc.name, State: api.StepErrored, Reason: api.ReasonExecutor},
			Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: err.Error()}, true
	}
	out.started()
	r, err := sess.Exec(ctx, executor.Step{ID: strconv.Itoa(svc.idx), Name: svc.name}, out)
	if errors.Is(err, executor.ErrDetached) {
		out.abandon()
		return StepUpdate{}, Result{}, false
	}
	stopped := err == nil && r.Reason == executor.ReasonStopped
	switch {
	case stopped:
		out.note("[knotless: detached step stopped at the run's end]\n")
	case err == nil:
		out.note(fmt.Sprintf("[knotless: detached step ended before the run's end, exit %d]\n", r.ExitCode))
	}
	if r.Note != "" {
		out.note("[knotless: " + r.Note + "]\n")
	}
	if cerr := out.close(); cerr != nil {
		log.Error("close step log", "err", cerr)
	}
	if stopped {
		state := api.StepSucceeded
		if runStopped {
			state = api.StepCancelled
		}
		log.Info("detached step stopped at the run's end", "duration", r.Duration.Round(time.Millisecond))
		return StepUpdate{Step: svc.idx, Name: svc.name, State: state, Duration: r.Duration}, Result{}, false
	}
	upd, res, fails := e.stepEnded(ctx, svc.idx, svc.st, svc.name, start, r, err, nil, log)
	if res.Message != "" {
		res.Message = "detached " + res.Message + " before the run's end"
	}
	log.Info("detached step ended", "state", upd.State, "reason", upd.Reason, "exit_code", intAttr(upd.ExitCode))
	return upd, res, fails
}
