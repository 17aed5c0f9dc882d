package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logmask"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/version"
	"knotless.dev/knotless/internal/workflow"
)

// execution is one run of a workflow by this runner process, from its
// setup log's first line to its result. It owns the run's setup log, the
// record of which steps ended (ended), the run's environment from the
// moment one is prepared or recovered until it is cleaned up or detached
// (envLeft), and this process's hold on the run (held): whether it
// finishes the run or hands it over to its successor. What earlier
// processes did of the run is in past; its phases are run's.
type execution struct {
	job     Job
	ex      executor.Executor
	rep     Reporter
	journal Journal // nil when rep keeps none
	log     *slog.Logger
	secrets []string
	past    history
	// held ends with errHandedOver when the run is handed over, or with
	// errRunEnding once this process finishes it (holdRun); endHold ends it.
	held    context.Context
	endHold context.CancelCauseFunc

	ended   map[int]bool // steps whose final state was reported
	setup   *setupLog
	wf      *workflow.Workflow
	timeout time.Duration // the run's timeout (the workflow's, or the default)
	stepRan bool          // a step of the workflow was started (by this process or an earlier one)
	// lostWrite says what the runner could not write for want of disk
	// space (outputs, say): the run does not end succeeded.
	lostWrite string
	// services are the detached steps still running (services.go).
	services []service
	// envLeft says an environment of the run may still exist: one was
	// made or recovered, and its cleanup did not succeed (yet).
	envLeft bool
}

// run executes the run's phases in order and returns its result; a phase
// that ends the run returns it early. A run handed over returns what it
// has, and Execute reports nothing (e.handedOver).
//
//	begin       the setup log's first line; setup is running
//	parse       the workflow, the images of needed runs, the secrets
//	session     the environment, prepared or recovered, caches restored
//	steps       each step in order, services beside them
//	afterSteps  exports, outputs, caches saved
//	release     the environment cleaned up, or detached on a handover
//
// Execute's report phase follows.
func (e *execution) run(ctx context.Context) Result {
	e.begin()
	if res, ended := e.parse(ctx); ended {
		return res
	}
	runCtx, cancelRun := e.deadline(ctx)
	defer cancelRun()
	sess, caches, res, ended := e.session(runCtx)
	if ended {
		return res
	}
	stopDetach := e.onHandover(func() { _ = sess.Detach() })
	defer stopDetach()
	defer e.release(ctx, sess)
	res = e.steps(runCtx, sess)
	if e.handedOver() {
		return res
	}
	e.afterSteps(ctx, sess, &res, caches)
	return res
}

// begin opens the setup log, reports setup running and writes the log's
// first line: what runs (a run this process begins) or who took it over.
func (e *execution) begin() {
	e.setup = openSetupLog(e.rep, e.secrets, e.job.LogLimit, e.log)
	if !e.ended[api.SetupStep] {
		e.reportStep(StepUpdate{Step: api.SetupStep, Name: SetupName, State: api.StepRunning})
	}
	if e.past.takenOver {
		e.setup.printf("%s took the run over from an earlier runner process at %s; a running step goes on where it was\n",
			e.past.by, time.Now().UTC().Format(time.RFC3339))
		return
	}
	commit := e.job.SHA
	if commit == "" {
		commit = "(none)"
	}
	if e.job.Ref != "" {
		commit += " (" + e.job.Ref + ")"
	}
	if n := e.job.WorkTreeChanges; n > 0 {
		commit += fmt.Sprintf(" and the work tree's uncommitted changes (%d paths)", n)
	}
	e.setup.printf("knotless-run %s: run %d of %s, commit %s\n", version.Version, e.job.Run, e.job.Repo, commit)
}

// parse reads the workflow (errored/workflow-invalid, with its
// FILE:LINE:COL), puts in the images named by needed runs' values, reports
// every step not begun as pending and refuses a secret no step can hold
// (errored/secret-invalid). ended says res is the run's result.
func (e *execution) parse(ctx context.Context) (res Result, ended bool) {
	sl := e.setup
	wf, err := workflow.ParseRun(e.job.WorkflowPath, e.job.WorkflowSource, e.job.combo())
	if err != nil {
		sl.printf("%s\n", err.Error())
		// Neutral advice: the same code serves pushed runs and `exec`.
		sl.printf("the workflow is invalid: fix the problems above (knotless workflow lint checks them before a run)\n")
		return Result{State: api.StateErrored, Reason: api.ReasonWorkflowInvalid, Message: firstLine(err.Error())}, true
	}
	if err := e.resolveNeedsImages(wf); err != nil {
		sl.printf("%s\n", err.Error())
		sl.printf("the image cannot be known: fix the workflow, or what the run it needs exports; nothing ran\n")
		return Result{State: api.StateErrored, Reason: api.ReasonWorkflowInvalid, Message: err.Error()}, true
	}
	e.wf = wf
	e.remaskIDTokens(ctx)
	for i, st := range wf.Steps {
		if _, known := e.past.step(i + 1); !known {
			e.reportStep(StepUpdate{Step: i + 1, Name: stepName(st, i), State: api.StepPending})
		}
	}
	// A value no environment variable can hold (a NUL byte, set through
	// an older server) would fail the step's execve with a bare "invalid
	// argument": end the run before anything starts, naming the secret.
	if name, err := e.unusableSecret(); err != nil {
		sl.printf("%s\n", err.Error())
		sl.printf("set the secret again with a value without NUL (knotless secret set %s); nothing ran\n", name)
		return Result{State: api.StateErrored, Reason: api.ReasonSecretInvalid, Message: err.Error()}, true
	}
	if !e.past.takenOver { // the first process warned already
		for _, name := range sortedKeys(e.job.Secrets) {
			if v := e.job.Secrets[name]; v != "" && logmask.TooShort(v) {
				sl.printf("warning: secret %s is shorter than %d bytes or blank: it is NOT masked in logs\n", name, logmask.MinSecretLen)
			}
		}
	}
	return Result{}, false
}

// deadline derives the run's context, which ends with cause errRunTimeout
// once the workflow's timeout (workflow.DefaultTimeout when it sets none)
// has passed since the run began (past.started: a run taken over keeps
// its first start).
func (e *execution) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	e.timeout = e.wf.Timeout
	if e.timeout <= 0 {
		e.timeout = workflow.DefaultTimeout
	}
	remaining := e.timeout - time.Since(e.past.started)
	return context.WithTimeoutCause(ctx, max(remaining, 0), errRunTimeout)
}

// session obtains the run's environment as its first step finds it, and
// what the restore of its caches found (for the save after the steps). A
// run taken over in its environment recovers the session an earlier
// process prepared and reads what that process's restore found; any other
// run sets one up (checkout, needed runs' outputs, Prepare: setup.go) and
// restores its caches. Later phases do not know which way it came. A
// handover cuts it short (the successor starts setup over). ended says
// res is the run's result, or that the run was handed over.
func (e *execution) session(runCtx context.Context) (sess executor.Session, caches cacheRestoreResult, res Result, ended bool) {
	setupCtx, cancelSetup := context.WithCancelCause(runCtx)
	defer cancelSetup(nil)
	stop := e.onHandover(func() { cancelSetup(errHandedOver) })
	defer stop()
	if h := e.job.Resume; h != nil && h.Session != nil {
		if sess, res, ended = e.recoverSession(runCtx, setupCtx, h); ended {
			return nil, nil, res, true
		}
		return sess, e.recoveredCaches(runCtx, sess), Result{}, false
	}
	if sess, res, ended = e.setUp(runCtx, setupCtx); ended {
		return nil, nil, res, true
	}
	caches = e.restoreCaches(runCtx, sess)
	e.recordCaches(runCtx, sess, caches)
	return sess, caches, Result{}, false
}

// recoverSession recovers the environment an earlier process prepared (or
// takes the one the caller recovered, or its failure). It fails the run
// errored with the executor's reason (e.g. pod-lost) when the environment
// cannot be recovered.
func (e *execution) recoverSession(runCtx, setupCtx context.Context, r *Resume) (executor.Session, Result, bool) {
	sess, err := r.Recovered, r.RecoverErr
	if sess == nil && err == nil {
		sess, err = e.ex.Recover(setupCtx, *r.Session)
	}
	e.envLeft = true // gone or not: only a cleanup or a sweep says so
	if err != nil {
		if e.handedOver() {
			return nil, Result{}, true
		}
		if res, stopped := e.stopped(runCtx); stopped {
			return nil, res, true
		}
		e.setup.printf("the run's environment could not be recovered: %v\n", err)
		reason := api.ReasonExecutor
		if f := (*executor.Fault)(nil); errors.As(err, &f) && executor.EnvironmentFault(f.Reason) {
			reason = f.Reason // e.g. pod-lost: the job pod is gone
		}
		return nil, Result{State: api.StateErrored, Reason: reason, Message: firstLine(err.Error())}, true
	}
	e.log.Info("run's environment recovered", "executor", e.ex.Name())
	return sess, Result{}, false
}

// release ends the run's hold on its environment: a run handed over
// detaches it (its steps go on for the successor); any other adds the
// services' logs to the setup log and cleans the environment up (bounded
// by 2 minutes, whatever ended ctx).
func (e *execution) release(ctx context.Context, sess executor.Session) {
	if !e.takeEnd() {
		_ = sess.Detach()
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	e.serviceLogs(cctx, sess)
	if err := sess.Cleanup(cctx); err != nil {
		e.log.Error("clean up session", "err", err)
		e.setup.printf("cleanup of the environment failed: %v\n", err)
		return
	}
	e.envLeft = false
}

// afterSteps reads what the steps left (exports, outputs) and saves the
// caches, unless the run's environment is known gone: its step ended
// pod-lost, or reading the exports found the step agent gone
// (executor.ErrEnvironmentGone). Then one line of the setup log says what was skipped
// and why, rather than each as a failure of its own.
func (e *execution) afterSteps(ctx context.Context, sess executor.Session, res *Result, caches cacheRestoreResult) {
	gone := ""
	if res.State == api.StateErrored && res.Reason == api.ReasonPodLost {
		gone = res.Message
	}
	if gone == "" {
		exports, err := e.collectExports(ctx, sess)
		if err == nil {
			res.Exports = exports
			e.collectOutputs(ctx, sess)
			e.saveCaches(ctx, sess, *res, caches)
			return
		}
		gone = err.Error()
	}
	var skipped []string
	if e.stepRan {
		skipped = append(skipped, "exports")
	}
	if len(e.wf.Outputs) > 0 {
		skipped = append(skipped, "outputs")
	}
	if len(caches) > 0 && res.State == api.StateSucceeded {
		skipped = append(skipped, "caches")
	}
	if len(skipped) == 0 {
		return
	}
	list := strings.Join(skipped, ", ")
	if i := strings.LastIndex(list, ", "); i >= 0 {
		list = list[:i] + " and " + list[i+2:]
	}
	e.setup.printf("%s: skipped: the run's environment is gone (%s)\n", list, gone)
}

// noSpace records a write that failed because the runner's disk is full:
// the run then ends errored/executor instead of succeeded.
func (e *execution) noSpace(err error, what string) {
	if err != nil && logship.NoSpace(err) && e.lostWrite == "" {
		e.lostWrite = fmt.Sprintf("%s: the runner's disk is full (%v)", what, err)
	}
}
