package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logmask"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/version"
	"knotless.dev/knotless/internal/workflow"
)

// Causes a run's context is cancelled with (context.CancelCauseFunc); they
// decide the run's reason.
var (
	// ErrCancelled: a person cancelled the run.
	ErrCancelled = errors.New("the run was cancelled")
	// ErrRunnerStopped: the runner is shutting down and stopped waiting.
	ErrRunnerStopped = errors.New("the runner was stopped before the run finished")
	// ErrRunFinished: the server ended the run already (e.g. runner-lost).
	ErrRunFinished = errors.New("the server ended the run")

	errRunTimeout = errors.New("the run reached its timeout")
	// errNotRegisteredStop: the runner stops because the server no longer
	// knows it; the run ends cancelled/runner-stopped, as on SIGTERM.
	errNotRegisteredStop = fmt.Errorf("%w: the server no longer knows this runner", ErrRunnerStopped)
)

// Job is one run to execute: what the server's claim says (or what `exec`
// found locally) plus where it executes on this host.
type Job struct {
	Run            int64
	Pipeline       int64
	Repo           string // OWNER/NAME
	Ref            string // full ref, e.g. refs/heads/main
	SHA            string
	Event          string // push, tag or manual ("" for exec)
	BeforeSHA      string // the ref's commit before the push; "" when new or manual
	Actor          string // handle of who pushed or triggered
	ServerURL      string // the server's URL, no trailing slash ("" for exec)
	RunnerName     string // this runner's name
	WorkflowPath   string // e.g. .knotless/workflows/ci.yml (for messages)
	WorkflowSource []byte
	// ID is the executor environment's ID; default "run-<Run>".
	ID string
	// Workspace is the checkout on this host; Checkout (when set) fills it.
	// HOME is the executor's to make, in the environment.
	Workspace string
	// Env holds the runner operator's variables (--env) for every step;
	// the KNOTLESS_* variables, the workflow's and the step's env win over
	// them, and HOME in it is dropped (the executor's HOME stands). Not
	// secrets: they are not masked.
	Env map[string]string
	// Secrets are the values the run received, by name. Every value is
	// masked in every log; steps get only those they list.
	Secrets map[string]string
	// Labels identify the environment to the executor (never secrets).
	Labels map[string]string
	// LogLimit caps each step's log in bytes; 0 means DefaultLogLimit.
	LogLimit int64
	// Grace is the SIGTERM-to-SIGKILL wait of a cancelled step; 0 means the
	// executor's default.
	Grace time.Duration
	// Checkout, when set, puts the commit at Workspace, which does not
	// exist or is an empty directory (made so that an executor that
	// prepares early can start meanwhile), as the workflow's checkout:
	// section c says; it writes git's output to log (the setup log). An
	// error ends the run errored/checkout.
	Checkout func(ctx context.Context, c workflow.Checkout, log io.Writer) error
	// OutputsDir is a directory on this host (made and emptied as needed)
	// where the workflow's outputs are copied out of the environment
	// before they are packed; empty means outputs are not collected (the
	// setup log says so). The caller removes it with the workspace.
	OutputsDir string
	// Caches is the runner's cache store for the workflow's `caches:`;
	// nil means caches are not used (the setup log says so).
	Caches *cache.Store
	// Cleanup, when set, removes what the run left on this host (the
	// workspace); it runs after the session's cleanup and before the result
	// is reported, whatever happened. Its error goes to the setup log.
	Cleanup func() error
	// Logger receives one line per event; nil means slog.Default().
	Logger *slog.Logger
	// Resume, when set, takes over a run that an earlier runner process
	// began (what its spool's journal says); nil runs the job from the start.
	Resume *Resume
	// Handover, when it closes, makes Execute let go of the run for the
	// runner's successor: the environment is detached, not cleaned up, a
	// running step goes on, and nothing more is reported (Execute returns
	// a Result with an empty State). Nil never closes.
	Handover <-chan struct{}
}

// Resume is what a restarted runner knows of a run it takes over, from the
// journal of the run's spool.
type Resume struct {
	// Session is the handle of the run's environment; nil when the earlier
	// process never got one (setup then starts over: a new checkout and a
	// new environment).
	Session *executor.Handle
	// Started is when the run began; its timeout counts from then.
	Started time.Time
	// Steps are the latest updates the earlier process recorded, by step
	// index (0 is setup).
	Steps map[int]api.UpdateStepInput
	// Checkpoints say how far each step's log got into the step's raw
	// output, by step index; the step that was running resumes there.
	Checkpoints map[int]logship.Checkpoint
	// By says who took the run over, for the setup log.
	By string
	// OutputsCollected says the earlier process packed the run's outputs
	// already (its spool holds them): they are not collected again.
	OutputsCollected bool
	// Recovered is the environment, when the caller recovered it already
	// (the runner does, before it sweeps what nobody takes over); else
	// Execute recovers Session itself. RecoverErr is why an earlier
	// recovery failed for good (executor.ErrNotRecoverable).
	Recovered  executor.Session
	RecoverErr error
}

// Journal is implemented by a Reporter that keeps what a restarted runner
// needs to take a run over (SpoolReporter): Execute records the
// environment's handle and each step log's checkpoints through it, and
// resumes a step's log at its checkpoint. With a Reporter that lacks it,
// runs are not recorded for taking over.
type Journal interface {
	// RecordSession records the environment's handle.
	RecordSession(h executor.Handle) error
	// Checkpoints opens step's checkpoint records.
	Checkpoints(step int) (*logship.CheckpointWriter, error)
	// ResumeLog opens step's log cut back to size bytes, for appending, and
	// returns its last byte.
	ResumeLog(step int, size int64) (io.WriteCloser, byte, error)
}

// errHandedOver ends an execution that let go of its run for the runner's
// successor.
var errHandedOver = errors.New("the run was handed over to the next runner process")

// Execute runs job's workflow through ex and reports everything to rep: it
// parses the workflow (errored/workflow-invalid), checks the commit out
// (errored/checkout), prepares a session (errored/executor), executes the
// steps in order (failed/exit-code, failed/timeout, ...), cleans the session
// up whatever happened, and reports the result, which it also returns.
//
// Canceling ctx stops the run; context.Cause(ctx) picks the reason:
// ErrRunnerStopped gives cancelled/runner-stopped, anything else
// cancelled/cancelled.
func Execute(ctx context.Context, job Job, ex executor.Executor, rep Reporter) Result {
	log := job.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("run", job.Run)
	secrets := make([]string, 0, len(job.Secrets))
	for _, v := range job.Secrets {
		if v != "" {
			secrets = append(secrets, v)
		}
	}
	e := &execution{job: job, ex: ex, rep: rep, log: log, secrets: secrets, ended: map[int]bool{}}
	if j, ok := rep.(Journal); ok {
		e.journal = j
	}
	if job.Resume != nil {
		for idx, u := range job.Resume.Steps {
			if u.State != api.StepPending && u.State != api.StepRunning {
				e.ended[idx] = true
			}
		}
	}
	res := e.run(ctx)
	if e.handedOver {
		if err := e.setup.close(); err != nil {
			log.Warn("close setup log", "err", err)
		}
		log.Info("run handed over to the next runner process; its environment goes on")
		return Result{}
	}
	res.Message = logmask.String(res.Message, secrets) // it leaves the runner too
	if job.Cleanup != nil {
		if err := job.Cleanup(); err != nil {
			log.Error("remove workspace", "err", err)
			e.setup.printf("removing the workspace failed: %v\n", err)
		}
	}
	if err := e.setup.close(); err != nil {
		log.Warn("close setup log", "err", err)
	}
	if e.lostWrite != "" && (res.State == "" || res.State == api.StateSucceeded) {
		res = Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: e.lostWrite}
	}
	if lost := e.setup.cw.lost; lost > 0 && (res.State == "" || res.State == api.StateSucceeded) {
		// Not a clean success: part of what the run's log says is gone.
		res = Result{State: api.StateErrored, Reason: api.ReasonExecutor,
			Message: fmt.Sprintf("%d bytes of the setup log were lost: the runner could not write them (%v)", lost, e.setup.cw.err)}
	}
	if !e.ended[api.SetupStep] {
		// The run ended before its first step: setup is where it failed.
		u := StepUpdate{Step: api.SetupStep, Name: SetupName, State: api.StepFailed, Reason: res.Reason, RunState: res.State}
		switch res.State {
		case api.StateSucceeded:
			u.State, u.Reason = api.StepSucceeded, ""
		case api.StateCancelled:
			u.State = api.StepCancelled
		}
		e.report(u)
	}
	if e.wf != nil {
		// Steps the run never reached (it ended in setup) are skipped.
		for i, st := range e.wf.Steps {
			if !e.ended[i+1] {
				e.report(StepUpdate{Step: i + 1, Name: stepName(st, i), State: api.StepSkipped})
			}
		}
	}
	if err := rep.Done(res); err != nil {
		log.Error("record run result", "err", err)
	}
	log.Info("run finished", "state", res.State, "reason", res.Reason, "exit_code", intAttr(res.ExitCode))
	return res
}

// unusableSecret returns the first (by name) secret a step of the workflow
// asks for whose value cannot reach a step, and why.
func (e *execution) unusableSecret() (string, error) {
	asked := map[string]bool{}
	for _, st := range e.wf.Steps {
		for _, n := range st.Secrets {
			asked[n] = true
		}
	}
	for _, name := range sortedKeys(e.job.Secrets) {
		if !asked[name] {
			continue
		}
		if err := api.CheckSecretValue(name, []byte(e.job.Secrets[name])); err != nil {
			return name, err
		}
	}
	return "", nil
}

// SetupName is the name the setup log (step 0) is reported under.
const SetupName = "setup"

type execution struct {
	ended      map[int]bool // steps whose final state was reported
	job        Job
	ex         executor.Executor
	rep        Reporter
	journal    Journal // nil when rep keeps none
	log        *slog.Logger
	secrets    []string
	setup      *setupLog
	wf         *workflow.Workflow
	handedOver bool // the run was let go for the runner's successor
	stepRan    bool // a step of the workflow was started (by this process or an earlier one)
	// lostWrite says what the runner could not write for want of disk
	// space (outputs, say): the run does not end succeeded.
	lostWrite string
	// services are the detached steps still running (services.go).
	services []service
}

// noSpace records a write that failed because the runner's disk is full:
// the run then ends errored/executor instead of succeeded.
func (e *execution) noSpace(err error, what string) {
	if err != nil && logship.NoSpace(err) && e.lostWrite == "" {
		e.lostWrite = fmt.Sprintf("%s: the runner's disk is full (%v)", what, err)
	}
}

// handingOver reports whether the runner is handing its runs over.
func (e *execution) handingOver() bool {
	return e.job.Handover != nil && isClosed(e.job.Handover)
}

func (e *execution) run(ctx context.Context) Result {
	e.setup = openSetupLog(e.rep, e.secrets, e.job.LogLimit, e.log)
	sl := e.setup
	resume := e.job.Resume
	if !e.ended[api.SetupStep] {
		e.report(StepUpdate{Step: api.SetupStep, Name: SetupName, State: api.StepRunning})
	}
	commit := e.job.SHA
	if commit == "" {
		commit = "(none)"
	}
	if e.job.Ref != "" {
		commit += " (" + e.job.Ref + ")"
	}
	if resume == nil {
		sl.printf("knotless-run %s: run %d of %s, commit %s\n", version.Version, e.job.Run, e.job.Repo, commit)
	} else {
		sl.printf("%s took the run over from an earlier runner process at %s; a running step goes on where it was\n",
			resume.By, time.Now().UTC().Format(time.RFC3339))
	}

	wf, err := workflow.Parse(e.job.WorkflowPath, e.job.WorkflowSource)
	if err != nil {
		sl.printf("%s\n", err.Error())
		// Neutral advice: the same code serves pushed runs and `exec`.
		sl.printf("the workflow is invalid: fix the problems above (knotless workflow lint checks them before a run)\n")
		return Result{State: api.StateErrored, Reason: api.ReasonWorkflowInvalid, Message: firstLine(err.Error())}
	}
	e.wf = wf
	for i, st := range wf.Steps {
		if _, known := e.resumed(i + 1); !known {
			e.report(StepUpdate{Step: i + 1, Name: stepName(st, i), State: api.StepPending})
		}
	}
	// A value no environment variable can hold (a NUL byte, set through
	// an older server) would fail the step's execve with a bare "invalid
	// argument": end the run before anything starts, naming the secret.
	if name, err := e.unusableSecret(); err != nil {
		sl.printf("%s\n", err.Error())
		sl.printf("set the secret again with a value without NUL (knotless secret set %s); nothing ran\n", name)
		return Result{State: api.StateErrored, Reason: api.ReasonSecretInvalid, Message: err.Error()}
	}
	if resume == nil {
		for _, name := range sortedKeys(e.job.Secrets) {
			if v := e.job.Secrets[name]; v != "" && logmask.TooShort(v) {
				sl.printf("warning: secret %s is shorter than %d bytes or blank: it is NOT masked in logs\n", name, logmask.MinSecretLen)
			}
		}
	}

	timeout := wf.Timeout
	if timeout <= 0 {
		timeout = workflow.DefaultTimeout
	}
	remaining := timeout
	if resume != nil && !resume.Started.IsZero() {
		remaining = timeout - time.Since(resume.Started)
	}
	runCtx, cancelRun := context.WithTimeoutCause(ctx, max(remaining, 0), errRunTimeout)
	defer cancelRun()
	// A handover cuts setup short: the successor starts it over.
	setupCtx, cancelSetup := context.WithCancelCause(runCtx)
	defer cancelSetup(nil)
	defer e.onHandover(func() { cancelSetup(errHandedOver) })()

	var sess executor.Session
	if resume != nil && resume.Session != nil {
		switch {
		case resume.Recovered != nil:
			sess = resume.Recovered
		case resume.RecoverErr != nil:
			err = resume.RecoverErr
		default:
			sess, err = e.ex.Recover(setupCtx, *resume.Session)
		}
		if err != nil {
			if e.handingOver() {
				e.handedOver = true
				return Result{}
			}
			if res, stopped := e.stopped(runCtx, timeout); stopped {
				return res
			}
			sl.printf("the run's environment could not be taken over: %v\n", err)
			reason := api.ReasonExecutor
			if f := (*executor.Fault)(nil); errors.As(err, &f) && executor.EnvironmentFault(f.Reason) {
				reason = f.Reason // e.g. pod-lost: the job pod is gone
			}
			return Result{State: api.StateErrored, Reason: reason, Message: firstLine(err.Error())}
		}
		e.log.Info("run's environment recovered", "executor", e.ex.Name())
	} else {
		var res Result
		var failed bool
		if sess, res, failed = e.setUp(runCtx, setupCtx, timeout, remaining); failed {
			return res
		}
	}
	defer e.onHandover(func() { _ = sess.Detach() })()
	defer func() {
		if e.handedOver || e.handingOver() {
			e.handedOver = true
			_ = sess.Detach()
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := sess.Cleanup(cctx); err != nil {
			e.log.Error("clean up session", "err", err)
			sl.printf("cleanup of the environment failed: %v\n", err)
		}
	}()
	// Caches: restored before the first step, saved after a success
	// (caches.go); a run taken over in its environment was restored by
	// its first process (one whose setup starts over is restored anew).
	var caches cacheRestoreResult
	if resume == nil || resume.Session == nil {
		caches = e.restoreCaches(runCtx, sess)
	} else if len(wf.Caches) > 0 {
		sl.printf("caches: not saved by this process: the run was taken over, and only the process that restored them knows whether their keys were hits\n")
	}
	res := e.steps(runCtx, sess, timeout)
	if !e.handedOver && !e.handingOver() {
		e.collectOutputs(ctx, sess)
		e.saveCaches(ctx, sess, res, caches)
	}
	return res
}

// resumed returns what an earlier process recorded of step idx.
func (e *execution) resumed(idx int) (api.UpdateStepInput, bool) {
	if e.job.Resume == nil {
		return api.UpdateStepInput{}, false
	}
	u, ok := e.job.Resume.Steps[idx]
	return u, ok && u.State != api.StepPending
}

// steps executes the workflow's steps in order and returns the run's result.
func (e *execution) steps(ctx context.Context, sess executor.Session, timeout time.Duration) Result {
	wf := e.wf
	res := Result{State: api.StateSucceeded}
	if _, stopped := e.stopped(ctx, timeout); !stopped && !e.ended[api.SetupStep] {
		// Later setup-log lines (cleanup) are still shipped; the CLI
		// prints what comes after the steps.
		e.report(StepUpdate{Step: api.SetupStep, Name: SetupName, State: api.StepSucceeded})
	}
	ended := false
	for i, st := range wf.Steps {
		idx, name := i+1, stepName(st, i)
		if e.ended[idx] {
			// An earlier runner process ran it to its end.
			if u, _ := e.resumed(idx); !ended {
				if r, fails := resultOf(u, st, name); fails {
					res, ended = r, true
				}
			}
			continue
		}
		if ended {
			e.report(StepUpdate{Step: idx, Name: name, State: api.StepSkipped})
			continue
		}
		if r, stopped := e.stopped(ctx, timeout); stopped {
			res, ended = r, true
			e.report(StepUpdate{Step: idx, Name: name, State: api.StepSkipped})
			continue
		}
		if st.Detach {
			if u, ok := e.resumed(idx); ok && u.State == api.StepRunning {
				// Started by an earlier runner process: it runs on.
				e.services = append(e.services, service{idx: idx, st: st, name: name})
				continue
			}
			if upd, r, fails := e.startService(ctx, sess, idx, st); fails {
				e.report(upd)
				res, ended = r, true
			}
			continue
		}
		upd, stepRes, fails := e.step(ctx, sess, idx, st, timeout)
		if e.handedOver {
			return Result{}
		}
		e.report(upd)
		if fails && !ended {
			res, ended = stepRes, true
		}
		if r, failed := e.checkServices(ctx, sess, timeout); failed && !ended {
			res, ended = r, true
		}
	}
	if e.handedOver || e.handingOver() {
		return res
	}
	if r, failed := e.stopServices(ctx, sess, timeout); failed && !ended {
		res = r
	}
	return res
}

// resultOf is the run's result as a step's final update u implies it (the
// update an earlier runner process recorded), and whether it ends the run.
func resultOf(u api.UpdateStepInput, st workflow.Step, name string) (Result, bool) {
	switch {
	case u.State == api.StepSucceeded || u.State == api.StepSkipped:
		return Result{}, false
	case u.State == api.StepCancelled:
		reason := u.Reason
		if reason == "" {
			reason = api.ReasonCancelled
		}
		return Result{State: api.StateCancelled, Reason: reason}, true
	case u.Reason == api.ReasonExitCode && u.ExitCode != nil:
		return Result{State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: u.ExitCode,
			Message: fmt.Sprintf("step %d (%s) exited with %d", u.Step, name, *u.ExitCode)}, !st.ContinueOnError
	case executor.EnvironmentFault(u.Reason) || u.Reason == api.ReasonWorkflowInvalid:
		return Result{State: api.StateErrored, Reason: u.Reason, Message: fmt.Sprintf("step %d (%s): %s", u.Step, name, u.Reason)}, true
	}
	return Result{State: api.StateFailed, Reason: u.Reason, Message: fmt.Sprintf("step %d (%s): %s", u.Step, name, u.Reason)}, !st.ContinueOnError
}

// step executes one step. It returns the step's final update and, when the
// step ends the run, the run's result.
func (e *execution) step(ctx context.Context, sess executor.Session, idx int, st workflow.Step, runTimeout time.Duration) (StepUpdate, Result, bool) {
	name := stepName(st, idx-1)
	log := e.log.With("step", idx, "name", name)
	var resumeAt *logship.Checkpoint
	if u, ok := e.resumed(idx); ok && u.State == api.StepRunning {
		c := e.job.Resume.Checkpoints[idx] // none: from the start
		resumeAt = &c
		log.Info("step resumed", "raw_offset", c.Raw, "log_bytes", c.Log)
	} else {
		e.report(StepUpdate{Step: idx, Name: name, State: api.StepRunning})
		log.Info("step started")
	}
	e.stepRan = true
	start := time.Now()

	out, err := e.stepLog(idx, resumeAt)
	if err != nil {
		log.Error("open step log", "err", err)
		return StepUpdate{Step: idx, Name: name, State: api.StepFailed, Reason: api.ReasonExecutor, Duration: time.Since(start)},
			Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: err.Error()}, true
	}
	xs, problem := e.buildStep(sess, st, name, out)
	xs.ID = strconv.Itoa(idx)
	var r executor.Result
	if problem == nil {
		if resumeAt != nil {
			xs.Offset = resumeAt.Raw
		}
		out.started()
		r, err = sess.Exec(ctx, xs, out)
	}
	if errors.Is(err, executor.ErrDetached) && e.handingOver() {
		e.handedOver = true
		out.abandon()
		return StepUpdate{}, Result{}, true
	}
	if r.Note != "" {
		out.note("[knotless: " + r.Note + "]\n")
	}
	if cerr := out.close(); cerr != nil {
		log.Error("close step log", "err", cerr)
	}
	upd, res, stop := e.stepEnded(ctx, idx, st, name, start, runTimeout, r, err, problem, log)
	if out.cw.lost > 0 || r.OutputLost {
		// Bytes of the log are gone: the step cannot read as a clean
		// success, and the setup log says so too (the step's own log has
		// the marker where they were lost, if the disk let the runner
		// write it, or the environment's note).
		msg := fmt.Sprintf("step %d (%s): %d bytes of its log were lost: the runner could not write them (%v)", idx, name, out.cw.lost, out.cw.err)
		if out.cw.lost == 0 {
			msg = fmt.Sprintf("step %d (%s): part of its output was lost: %s", idx, name, r.Note)
		}
		fmt.Fprintf(e.setup, "%s\n", msg)
		e.setup.flush()
		if res.State == "" || res.State == api.StateFailed {
			upd.State, upd.Reason = api.StepFailed, api.ReasonExecutor
			res, stop = Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: msg}, true
		}
	}
	log.Info("step ended", "state", upd.State, "reason", upd.Reason, "exit_code", intAttr(upd.ExitCode), "duration", upd.Duration.Round(time.Millisecond))
	return upd, res, stop
}

// stepEnded makes a step's update and the run's result of how its Exec
// ended (r, err) or why it did not run (problem).
func (e *execution) stepEnded(ctx context.Context, idx int, st workflow.Step, name string, start time.Time, runTimeout time.Duration,
	r executor.Result, err, problem error, log *slog.Logger) (StepUpdate, Result, bool) {
	upd := StepUpdate{Step: idx, Name: name, Duration: time.Since(start)}
	if r.Duration > 0 {
		upd.Duration = r.Duration
	}
	if r.ExitCode >= 0 && problem == nil && err == nil {
		upd.ExitCode = ptr(r.ExitCode)
	}

	if res, stopped := e.stopped(ctx, runTimeout); stopped {
		upd.State, upd.Reason = api.StepCancelled, res.Reason
		if res.Reason == api.ReasonTimeout {
			upd.State = api.StepFailed
		}
		return upd, res, true
	}
	switch {
	case problem != nil:
		upd.State, upd.Reason = api.StepFailed, api.ReasonWorkflowInvalid
		return upd, Result{State: api.StateErrored, Reason: api.ReasonWorkflowInvalid, Message: firstLine(problem.Error())}, true
	case err != nil:
		fmt.Fprintf(e.setup, "step %d (%s) could not be executed: %v\n", idx, name, err)
		e.setup.flush()
		upd.State, upd.Reason = api.StepFailed, api.ReasonExecutor
		return upd, Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: firstLine(err.Error())}, true
	case r.Reason == api.ReasonCancelled:
		// Nobody cancelled the run (its context is live): the step was
		// stopped by its environment, which an executor should have said.
		// Never cancelled by nobody: errored, naming what happened.
		msg := fmt.Sprintf("step %d (%s) was stopped by its environment, not by a person", idx, name)
		if r.Note != "" {
			msg += ": " + r.Note
		}
		upd.State, upd.Reason = api.StepFailed, api.ReasonExecutor
		return upd, Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: msg}, true
	case executor.EnvironmentFault(r.Reason):
		upd.State, upd.Reason = api.StepFailed, r.Reason
		return upd, Result{State: api.StateErrored, Reason: r.Reason, Message: fmt.Sprintf("step %d (%s): %s", idx, name, r.Reason)}, true
	case r.Reason != "":
		upd.State, upd.Reason = api.StepFailed, r.Reason
		msg := fmt.Sprintf("step %d (%s): %s", idx, name, r.Reason)
		if r.Reason == api.ReasonTimeout {
			msg = fmt.Sprintf("step %d (%s) reached its timeout of %s", idx, name, st.Timeout)
		}
		return upd, Result{State: api.StateFailed, Reason: r.Reason, Message: msg}, !st.ContinueOnError
	case r.ExitCode != 0:
		upd.State, upd.Reason = api.StepFailed, api.ReasonExitCode
		return upd, Result{State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: ptr(r.ExitCode),
			Message: fmt.Sprintf("step %d (%s) exited with %d", idx, name, r.ExitCode)}, !st.ContinueOnError
	}
	upd.State = api.StepSucceeded
	return upd, Result{}, false
}

// stopped reports whether the run's context ended, and the run's result if
// so: failed/timeout for the run's timeout, cancelled/runner-stopped when
// the runner stops, cancelled/cancelled otherwise.
func (e *execution) stopped(ctx context.Context, timeout time.Duration) (Result, bool) {
	if ctx.Err() == nil {
		return Result{}, false
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errRunTimeout):
		msg := "the run reached its timeout"
		if timeout > 0 {
			msg = fmt.Sprintf("the run reached its timeout of %s", timeout)
		}
		return Result{State: api.StateFailed, Reason: api.ReasonTimeout, Message: msg}, true
	case errors.Is(cause, ErrRunnerStopped):
		return Result{State: api.StateCancelled, Reason: api.ReasonRunnerStopped, Message: cause.Error()}, true
	case errors.Is(cause, ErrRunFinished):
		return Result{State: api.StateCancelled, Reason: api.ReasonCancelled, Message: ErrRunFinished.Error()}, true
	}
	return Result{State: api.StateCancelled, Reason: api.ReasonCancelled}, true
}

// buildStep turns a workflow step into an executor step. Notes for the
// person reading the log go to out. A problem (a broken shared step) means
// the step cannot run.
func (e *execution) buildStep(sess executor.Session, st workflow.Step, name string, out io.Writer) (executor.Step, error) {
	env := make(map[string]string, len(e.job.Env)+16)
	for k, v := range localeDefaults {
		env[k] = v
	}
	for k, v := range e.job.Env {
		env[k] = v
	}
	// HOME is the executor's: a host path means nothing in a container.
	delete(env, "HOME")
	for k, v := range e.job.runEnv(e.wf, sess.Workdir()) {
		env[k] = v
	}
	for k, v := range e.wf.Env {
		env[k] = v
	}
	script, shell := st.Run, st.Shell
	if st.Uses != "" {
		shared, err := LoadSharedStep(e.job.Workspace, st.Uses)
		if err == nil {
			var inputs map[string]string
			inputs, err = shared.InputEnv(st.With)
			if err == nil {
				for k, v := range shared.Env {
					env[k] = v
				}
				for k, v := range inputs {
					env[k] = v
				}
				env["KNOTLESS_STEP_DIR"] = joinWorkdir(sess.Workdir(), shared.Dir)
				script = shared.Run
				if shell == "" {
					shell = shared.Shell
				}
			}
		}
		if err != nil {
			fmt.Fprintf(out, "[knotless: %v]\n", err)
			return executor.Step{}, err
		}
	}
	for k, v := range st.Env {
		env[k] = v
	}
	secrets := map[string]string{}
	for _, n := range st.Secrets {
		if v, ok := e.job.Secrets[n]; ok {
			secrets[n] = v
		} else {
			fmt.Fprintf(out, "[knotless: secret %s has no value for this run; the step runs without it]\n", n)
		}
	}
	argv := strings.Fields(shell)
	if len(argv) == 0 {
		argv = slices.Clone(executor.DefaultShell)
	}
	return executor.Step{
		Name:    name,
		Script:  script,
		Shell:   argv,
		Env:     env,
		Secrets: secrets,
		Timeout: st.Timeout,
		Grace:   e.job.Grace,
	}, nil
}

// localeDefaults are the variables every step starts from, beneath the
// runner's --env-pass and --env and the workflow's env (all of which may
// set them): text in UTF-8 and times in UTC, whatever the runner's host
// or the image says, as on hosted CI runners.
var localeDefaults = map[string]string{"LANG": "C.UTF-8", "TZ": "UTC"}

// lostMarkWait is how long a step's end waits for room to write the
// marker of the log bytes it lost (the shipper gives back the space of
// what it delivered).
var lostMarkWait = 10 * time.Second

// stepLog opens step idx's log through the masker and the cap, resuming it
// at the checkpoint at when the step was running under an earlier runner
// process. The returned writer records checkpoints as it goes.
func (e *execution) stepLog(idx int, at *logship.Checkpoint) (*stepOut, error) {
	o := &stepOut{e: e, idx: idx}
	var w io.WriteCloser
	var err error
	if at != nil && e.journal != nil {
		var last byte
		if w, last, err = e.journal.ResumeLog(idx, at.Log); err != nil {
			return nil, err
		}
		o.file = &countWriter{w: w, n: at.Log, last: last}
		o.cw = resumeCapWriter(o.file, e.job.LogLimit, at.Log, last)
		o.m = logmask.NewResumed(o.cw, e.secrets, at.Hidden)
		o.raw = at.Raw
		by := "a new knotless-run process"
		if e.job.Resume != nil && e.job.Resume.By != "" {
			by = e.job.Resume.By
		}
		o.mark(RestartMarker(by, time.Now()))
	} else {
		if w, err = e.rep.Log(idx); err != nil {
			return nil, err
		}
		o.file = &countWriter{w: w}
		o.cw = newCapWriter(o.file, e.job.LogLimit)
		o.m = logmask.New(o.cw, e.secrets)
	}
	o.w = w
	if e.journal != nil {
		if o.cp, err = e.journal.Checkpoints(idx); err != nil {
			e.log.Warn("could not record checkpoints: a restarted runner would resume this step's log from its start", "step", idx, "err", err)
		}
	}
	return o, nil
}

// stepOut is a step's log: what Exec writes (the step's raw output) and the
// runner's own notes go through the masker and the cap to the reporter.
// After each write of output it records a checkpoint: how many raw output
// bytes the log holds, masked, and its size.
type stepOut struct {
	e    *execution
	idx  int
	m    *logmask.Writer
	cw   *capWriter
	file *countWriter
	w    io.WriteCloser
	cp   *logship.CheckpointWriter

	raw    int64 // raw output offset of the masker's first byte of output
	notes  int64 // bytes of notes the masker took before the output began
	output bool  // the step's output has begun
}

func (o *stepOut) Write(p []byte) (int, error) {
	n, err := o.m.Write(p)
	if o.output && o.cp != nil {
		if dec, hidden, ok := o.m.Checkpoint(); ok && dec >= o.notes {
			if cerr := o.cp.Save(logship.Checkpoint{Raw: o.raw + dec - o.notes, Log: o.file.n, Hidden: hidden}); cerr != nil {
				o.e.log.Warn("record a checkpoint", "step", o.idx, "err", cerr)
				_ = o.cp.Close()
				o.cp = nil
			}
		}
	}
	return n, err
}

// started marks where the step's own output begins: what was written
// before (notes such as a missing secret) is not part of it.
func (o *stepOut) started() {
	if o.output {
		return
	}
	if err := o.m.Flush(); err != nil {
		o.e.log.Warn("flush step log", "step", o.idx, "err", err)
	}
	o.notes, _, _ = o.m.Checkpoint()
	o.output = true
}

// note writes a line of the runner's own after the step's output.
func (o *stepOut) note(s string) {
	o.output = false
	_, _ = io.WriteString(o.m, s)
}

// Resumed implements agent.Resumer: a marker line where the output goes on
// after a dropped connection.
func (o *stepOut) Resumed(_ int64, err error) {
	o.e.log.Info("step output resumed on a new connection", "step", o.idx, "after", err)
	o.mark(ReconnectMarker(err, time.Now()))
}

// mark puts a marker line of the runner's own into the log below the
// masker (so that it never splits a secret the masker is matching), at
// the next line's start (so that it never splits a line of the step's).
func (o *stepOut) mark(line string) {
	o.file.mark(logmask.String(line, o.e.secrets))
}

// close flushes the masker and closes the reporter's writer.
func (o *stepOut) close() error {
	err := o.m.Close()
	o.file.flushMark()
	if o.cw.lost > 0 {
		marked := o.cw.finish(lostMarkWait, reserveOf(o.w))
		o.e.log.Error("step log lost bytes", "step", o.idx, "lost_bytes", o.cw.lost, "err", o.cw.err, "marked_in_log", marked)
	}
	if o.cp != nil {
		_ = o.cp.Close()
	}
	return errors.Join(err, o.w.Close())
}

// abandon closes the log as it is, leaving the masker's held bytes for the
// next runner process (it resumes at the last checkpoint).
func (o *stepOut) abandon() {
	if o.cp != nil {
		_ = o.cp.Close()
	}
	_ = o.w.Close()
}

// countWriter counts the bytes written through it (n: its file's size),
// keeps the last, and puts a marker line (mark) at the next line's start.
type countWriter struct {
	w       io.Writer
	n       int64
	last    byte
	pending string // a marker line waiting for the next line's start
}

// Write writes p, with a pending marker line where p's first line begins
// (before p when the log is at a line's start). It returns how many bytes
// of p were written.
func (c *countWriter) Write(p []byte) (int, error) {
	if c.pending == "" || len(p) == 0 {
		return c.write(p)
	}
	cut := 0
	if c.n > 0 && c.last != '\n' {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			return c.write(p)
		}
		cut = i + 1
	}
	n, err := c.write(p[:cut])
	if err != nil {
		return n, err
	}
	marker := c.pending
	c.pending = ""
	if _, err := c.write([]byte(marker)); err != nil {
		return n, err
	}
	m, err := c.write(p[cut:])
	return n + m, err
}

func (c *countWriter) write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if n > 0 {
		c.last = p[n-1]
	}
	return n, err
}

// mark makes line (ending in a newline) the log's next line of its own.
func (c *countWriter) mark(line string) { c.pending += line }

// flushMark writes a marker still waiting when the log ends: after the
// log's last line, ended by a newline where the step gave it none.
func (c *countWriter) flushMark() {
	if c.pending == "" {
		return
	}
	line := c.pending
	c.pending = ""
	if c.n > 0 && c.last != '\n' {
		line = "\n" + line
	}
	_, _ = c.write([]byte(line))
}

func (e *execution) report(u StepUpdate) {
	switch u.State {
	case api.StepPending, api.StepRunning:
	default:
		e.ended[u.Step] = true
	}
	if err := e.rep.Step(u); err != nil {
		e.log.Error("record step update", "step", u.Step, "state", u.State, "err", err)
	}
}

// setupLog is the run's setup log (step 0), masked and capped like a step's.
// Every printf is flushed through the masker at once.
type setupLog struct {
	w      io.WriteCloser
	cw     *capWriter
	m      *logmask.Writer
	log    *slog.Logger
	closed bool
}

func openSetupLog(rep Reporter, secrets []string, limit int64, log *slog.Logger) *setupLog {
	w, err := rep.Log(api.SetupStep)
	if err != nil {
		log.Error("open setup log", "err", err)
		w = nopWriteCloser{io.Discard}
	}
	cw := newCapWriter(w, limit)
	return &setupLog{w: w, cw: cw, m: logmask.New(cw, secrets), log: log}
}

func (s *setupLog) Write(p []byte) (int, error) {
	if s.closed {
		return len(p), nil
	}
	return s.m.Write(p)
}

func (s *setupLog) printf(format string, args ...any) {
	fmt.Fprintf(s, format, args...)
	s.flush()
}

func (s *setupLog) flush() {
	if s.closed {
		return
	}
	if err := s.m.Flush(); err != nil {
		s.log.Warn("flush setup log", "err", err)
	}
}

func (s *setupLog) close() error {
	if s == nil || s.closed {
		return nil
	}
	s.closed = true
	err := s.m.Close()
	if s.cw.lost > 0 {
		marked := s.cw.finish(lostMarkWait, reserveOf(s.w))
		s.log.Error("setup log lost bytes", "lost_bytes", s.cw.lost, "err", s.cw.err, "marked_in_log", marked)
	}
	return errors.Join(err, s.w.Close())
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func stepName(st workflow.Step, i int) string {
	switch {
	case st.Name != "":
		return st.Name
	case st.Uses != "":
		return st.Uses
	}
	return fmt.Sprintf("step %d", i+1)
}

func joinWorkdir(workdir, rel string) string {
	return strings.TrimRight(workdir, "/") + "/" + strings.TrimPrefix(rel, "./")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func intAttr(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// onHandover calls f once the runner hands this run over (Job.Handover
// closes), unless the returned stop is called first. Without a Handover
// channel it does nothing.
func (e *execution) onHandover(f func()) (stop func()) {
	if e.job.Handover == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-e.job.Handover:
			f()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// runEnv is the one place that builds the variables Knotless gives every
// step of the run (docs/workflow.md, "What every step sees"): CI,
// KNOTLESS and the KNOTLESS_* names, for the workflow wf and the
// checkout's path workdir in the environment. The runner operator's --env
// comes before them and the workflow's and step's env after (they win);
// HOME and TMPDIR are the executor's (the step agent adds them).
// Variables that do not apply (KNOTLESS_BRANCH on a tag run, the URLs of
// a run without server) are left out rather than set empty.
func (j *Job) runEnv(wf *workflow.Workflow, workdir string) map[string]string {
	env := map[string]string{
		"CI":                 "true",
		"KNOTLESS":           "true",
		"KNOTLESS_REPO":      j.Repo,
		"KNOTLESS_REF":       j.Ref,
		"KNOTLESS_SHA":       j.SHA,
		"KNOTLESS_PIPELINE":  strconv.FormatInt(j.Pipeline, 10),
		"KNOTLESS_RUN":       strconv.FormatInt(j.Run, 10),
		"KNOTLESS_WORKFLOW":  wf.Name,
		"KNOTLESS_WORKSPACE": workdir,
	}
	name, typ := api.RefName(j.Ref)
	set := func(k, v string) {
		if v != "" {
			env[k] = v
		}
	}
	set("KNOTLESS_REF_NAME", name)
	set("KNOTLESS_REF_TYPE", typ)
	switch typ {
	case api.RefBranch:
		env["KNOTLESS_BRANCH"] = name
	case api.RefTag:
		env["KNOTLESS_TAG"] = name
	}
	set("KNOTLESS_EVENT", j.Event)
	set("KNOTLESS_BEFORE_SHA", j.BeforeSHA)
	set("KNOTLESS_ACTOR", j.Actor)
	set("KNOTLESS_RUNNER", j.RunnerName)
	if j.ServerURL != "" {
		env["KNOTLESS_SERVER_URL"] = j.ServerURL
		env["KNOTLESS_RUN_URL"] = j.ServerURL + api.RunPath(j.Run)
	}
	return env
}
