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
// up whatever happened, and reports the result, which it also returns. The
// phases are execution.run's; a run handed over (Job.Handover) returns a
// Result with an empty State and reports nothing more.
//
// Canceling ctx stops the run; context.Cause(ctx) picks the reason:
// ErrRunnerStopped gives cancelled/runner-stopped, anything else
// cancelled/cancelled.
func Execute(ctx context.Context, job Job, ex executor.Executor, rep Reporter) Result {
	e := newExecution(job, ex, rep)
	res := e.run(ctx)
	if !e.takeEnd() {
		if err := e.setup.close(); err != nil {
			e.log.Warn("close setup log", "err", err)
		}
		e.log.Info("run handed over to the next runner process; its environment goes on")
		return Result{}
	}
	return e.report(res)
}

// newExecution returns the execution of job: nothing has run yet.
func newExecution(job Job, ex executor.Executor, rep Reporter) *execution {
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
	e := &execution{job: job, ex: ex, rep: rep, log: log, secrets: secrets, ended: map[int]bool{},
		past: historyOf(job.Resume, time.Now())}
	e.held, e.endHold = holdRun(job)
	if j, ok := rep.(Journal); ok {
		e.journal = j
	}
	for idx := range e.past.steps {
		if e.past.ended(idx) {
			e.ended[idx] = true
		}
	}
	e.stepRan = e.past.stepRan()
	return e
}

// report is the run's last phase: it removes the workspace, closes the
// setup log, turns a success that lost bytes into errored/executor, marks
// setup and every step not reached as ended, and reports res (Done).
func (e *execution) report(res Result) Result {
	res.Message = logmask.String(res.Message, e.secrets) // it leaves the runner too (id tokens included)
	if e.job.Cleanup != nil {
		if err := e.job.Cleanup(); err != nil {
			e.log.Error("remove workspace", "err", err)
			e.setup.printf("removing the workspace failed: %v\n", err)
		}
	}
	if err := e.setup.close(); err != nil {
		e.log.Warn("close setup log", "err", err)
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
		u := StepUpdate{Step: api.SetupStep, Name: SetupName, RunState: res.State}
		u.State, u.Reason = stepEndedWith(res)
		e.reportStep(u)
	}
	if e.wf != nil {
		// Steps the run never reached (it ended in setup) are skipped; one
		// an earlier process left running ends as the run does (its
		// environment could not be recovered, or the run was cancelled
		// first): it ran, so it was not skipped.
		for i, st := range e.wf.Steps {
			if e.ended[i+1] {
				continue
			}
			u := StepUpdate{Step: i + 1, Name: stepName(st, i), State: api.StepSkipped}
			if _, running := e.past.running(i + 1); running {
				u.State, u.Reason = stepEndedWith(res)
			}
			e.reportStep(u)
		}
	}
	res.EnvironmentRemoved = !e.envLeft
	res.Caches = e.cacheUsage(context.Background()) // bounded by cache.UsageTimeout
	if err := e.rep.Done(res); err != nil {
		e.log.Error("record run result", "err", err)
	}
	e.log.Info("run finished", "state", res.State, "reason", res.Reason, "exit_code", intAttr(res.ExitCode))
	return res
}

// stepEndedWith is the final state and reason of a step that ends with
// the run (setup, or a step left running) when the run's result is res.
func stepEndedWith(res Result) (state, reason string) {
	switch res.State {
	case api.StateSucceeded:
		return api.StepSucceeded, ""
	case api.StateCancelled:
		return api.StepCancelled, res.Reason
	case api.StateErrored:
		return api.StepErrored, res.Reason
	}
	return api.StepFailed, res.Reason
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

// reportStep reports a step update, and records that the step ended if so.
func (e *execution) reportStep(u StepUpdate) {
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
