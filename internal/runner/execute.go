package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
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
	Run      int64
	Pipeline int64
	Repo     string // OWNER/NAME
	Ref      string // full ref, e.g. refs/heads/main
	SHA      string
	// WorkTreeChanges is how many paths of Workspace differ from SHA
	// (git status --porcelain: changed, added, deleted, untracked): exec
	// runs the work tree as it is, and the setup log's first line says so.
	WorkTreeChanges int
	Event           string // push, tag or manual ("" for exec)
	BeforeSHA       string // the ref's commit before the push; "" when new or manual
	Actor           string // handle of who pushed or triggered
	ServerURL       string // the server's URL, no trailing slash ("" for exec)
	RunnerName      string // this runner's name
	WorkflowPath    string // e.g. .knotless/workflows/ci.yml (for messages)
	WorkflowSource  []byte
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
	// IDTokens gets a step's id tokens when the step starts (ServerIDTokens);
	// nil: there is no server (exec), and steps run without them.
	IDTokens IDTokenFunc
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
	// Matrix is the run's values of its workflow's `matrix:` (nil when
	// it has none): which of the workflow's runs this is.
	Matrix []api.MatrixValue
	// Needs are the runs this one needs (`needs:`), all succeeded: their
	// outputs and exported values go into the checkout before the first
	// step (needs.go). NeedOutputs opens the body of a needed run's
	// outputs archive (the server's dev.knotless.runner.getNeedOutputs);
	// nil when there is no server.
	Needs       []api.NeededRun
	NeedOutputs func(ctx context.Context, need int64) (io.ReadCloser, error)
	// Attempt counts the run's attempts from 1 (0 reads as 1): a retry
	// after its environment failed is attempt 2, ...
	Attempt int
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
	// StepStarted is when each step the earlier process started began (the
	// At of its first running update), by step index: its id tokens'
	// issue time.
	StepStarted map[int]time.Time
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
	ResumeLog(step int, size int64) (logship.LogFile, byte, error)
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
	res.Message = logmask.String(res.Message, e.secrets) // it leaves the runner too (id tokens included)
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
		case api.StateErrored:
			u.State = api.StepErrored
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
	res.EnvironmentRemoved = !e.envLeft
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
	for _, s := range e.wf.Services {
		for _, n := range s.Secrets {
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
	// envLeft says an environment of the run may still exist: one was
	// made or recovered, and its cleanup did not succeed (yet).
	envLeft bool
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
	if n := e.job.WorkTreeChanges; n > 0 {
		commit += fmt.Sprintf(" and the work tree's uncommitted changes (%d paths)", n)
	}
	if resume == nil {
		sl.printf("knotless-run %s: run %d of %s, commit %s\n", version.Version, e.job.Run, e.job.Repo, commit)
	} else {
		sl.printf("%s took the run over from an earlier runner process at %s; a running step goes on where it was\n",
			resume.By, time.Now().UTC().Format(time.RFC3339))
	}

	wf, err := workflow.ParseRun(e.job.WorkflowPath, e.job.WorkflowSource, e.job.combo())
	if err != nil {
		sl.printf("%s\n", err.Error())
		// Neutral advice: the same code serves pushed runs and `exec`.
		sl.printf("the workflow is invalid: fix the problems above (knotless workflow lint checks them before a run)\n")
		return Result{State: api.StateErrored, Reason: api.ReasonWorkflowInvalid, Message: firstLine(err.Error())}
	}
	if err := e.resolveNeedsImages(wf); err != nil {
		sl.printf("%s\n", err.Error())
		sl.printf("the image cannot be known: fix the workflow, or what the run it needs exports; nothing ran\n")
		return Result{State: api.StateErrored, Reason: api.ReasonWorkflowInvalid, Message: err.Error()}
	}
	e.wf = wf
	e.remaskIDTokens(ctx)
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
		e.envLeft = true // gone or not: only a cleanup or a sweep says so
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
		e.serviceLogs(cctx, sess)
		if err := sess.Cleanup(cctx); err != nil {
			e.log.Error("clean up session", "err", err)
			sl.printf("cleanup of the environment failed: %v\n", err)
			return
		}
		e.envLeft = false
	}()
	// Caches: restored before the first step, saved after a success
	// (caches.go); a run taken over in its environment was restored by
	// its first process, which left in the environment what the restore
	// found, for the save (one whose setup starts over is restored anew).
	var caches cacheRestoreResult
	if resume == nil || resume.Session == nil {
		caches = e.restoreCaches(runCtx, sess)
		e.recordCaches(runCtx, sess, caches)
	} else {
		caches = e.recoveredCaches(runCtx, sess)
	}
	res := e.steps(runCtx, sess, timeout)
	if !e.handedOver && !e.handingOver() {
		e.afterSteps(ctx, sess, &res, caches)
	}
	return res
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
