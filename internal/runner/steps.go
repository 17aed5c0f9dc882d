package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/workflow"
)

// steps executes the workflow's steps in order, each once across runner
// processes (a step an earlier process ended counts as it ended; one it
// left running is attached to), with the detached ones (services) beside
// them, and returns the run's result. It stops at a handover, leaving the
// rest to the successor.
func (e *execution) steps(ctx context.Context, sess executor.Session) Result {
	wf := e.wf
	res := Result{State: api.StateSucceeded}
	if _, stopped := e.stopped(ctx); !stopped && !e.ended[api.SetupStep] {
		// Later setup-log lines (cleanup) are still shipped; the CLI
		// prints what comes after the steps.
		e.reportStep(StepUpdate{Step: api.SetupStep, Name: SetupName, State: api.StepSucceeded})
	}
	ended := false
	for i, st := range wf.Steps {
		idx, name := i+1, stepName(st, i)
		if e.ended[idx] {
			// An earlier runner process ran it to its end.
			if u, _ := e.past.step(idx); !ended {
				if r, fails := resultOf(u, st, name); fails {
					res, ended = r, true
				}
			}
			continue
		}
		if ended {
			e.reportStep(StepUpdate{Step: idx, Name: name, State: api.StepSkipped})
			continue
		}
		if r, stopped := e.stopped(ctx); stopped {
			res, ended = r, true
			e.reportStep(StepUpdate{Step: idx, Name: name, State: api.StepSkipped})
			continue
		}
		if st.Detach {
			if _, running := e.past.running(idx); running {
				// Started by an earlier runner process: it runs on.
				e.services = append(e.services, service{idx: idx, st: st, name: name})
				continue
			}
			if upd, r, fails := e.startService(ctx, sess, idx, st); fails {
				e.reportStep(upd)
				res, ended = r, true
			}
			continue
		}
		upd, stepRes, fails := e.step(ctx, sess, idx, st)
		if e.handedOver() {
			// Let go mid-step (no update: the successor reports it), or
			// just after the step ended.
			if upd.State != "" {
				e.reportStep(upd)
			}
			return Result{}
		}
		e.reportStep(upd)
		if fails && !ended {
			res, ended = stepRes, true
		}
		if r, failed := e.checkServices(ctx, sess); failed && !ended {
			res, ended = r, true
		}
	}
	if e.handedOver() {
		return res
	}
	if r, failed := e.stopServices(ctx, sess); failed && !ended {
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
	case u.State == api.StepErrored || executor.EnvironmentFault(u.Reason) || u.Reason == api.ReasonWorkflowInvalid:
		return Result{State: api.StateErrored, Reason: u.Reason, Message: fmt.Sprintf("step %d (%s): %s", u.Step, name, u.Reason)}, true
	}
	return Result{State: api.StateFailed, Reason: u.Reason, Message: fmt.Sprintf("step %d (%s): %s", u.Step, name, u.Reason)}, !st.ContinueOnError
}

// step executes one step. It returns the step's final update and, when the
// step ends the run, the run's result.
func (e *execution) step(ctx context.Context, sess executor.Session, idx int, st workflow.Step) (StepUpdate, Result, bool) {
	name := stepName(st, idx-1)
	log := e.log.With("step", idx, "name", name)
	start := time.Now()
	resumeAt, running := e.past.running(idx)
	if running {
		log.Info("step resumed", "raw_offset", resumeAt.Raw, "log_bytes", resumeAt.Log)
	} else {
		// The running update's At is the step's start, and its id tokens'
		// issue time: a successor asks for them again with it.
		e.reportStep(StepUpdate{Step: idx, Name: name, State: api.StepRunning, At: start})
		log.Info("step started")
	}
	e.stepRan = true
	// Id tokens before the log opens: its masker must know them. A step
	// taken over got its tokens from the earlier process (remaskIDTokens).
	var tokens map[string]string
	if resumeAt == nil {
		var failed *StepUpdate
		var res Result
		if tokens, failed, res = e.stepTokens(ctx, idx, st, name, start); failed != nil {
			failed.Duration = time.Since(start)
			return *failed, res, true
		}
	}

	out, err := e.stepLog(idx, resumeAt)
	if err != nil {
		log.Error("open step log", "err", err)
		return StepUpdate{Step: idx, Name: name, State: api.StepErrored, Reason: api.ReasonExecutor, Duration: time.Since(start)},
			Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: err.Error()}, true
	}
	xs, problem := e.buildStep(sess, st, name, out, tokens)
	xs.ID = strconv.Itoa(idx)
	var r executor.Result
	if problem == nil {
		if resumeAt != nil {
			xs.Offset = resumeAt.Raw
		}
		out.started()
		r, err = sess.Exec(ctx, xs, out)
	}
	if errors.Is(err, executor.ErrDetached) && e.handedOver() {
		out.abandon()
		return StepUpdate{}, Result{}, true
	}
	if r.Note != "" {
		out.note("[knotless: " + r.Note + "]\n")
	}
	if cerr := out.close(); cerr != nil {
		log.Error("close step log", "err", cerr)
	}
	upd, res, stop := e.stepEnded(ctx, idx, st, name, start, r, err, problem, log)
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
			upd.State, upd.Reason, upd.ExitCode = api.StepErrored, api.ReasonExecutor, nil
			res, stop = Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: msg}, true
		}
	}
	log.Info("step ended", "state", upd.State, "reason", upd.Reason, "exit_code", intAttr(upd.ExitCode), "duration", upd.Duration.Round(time.Millisecond))
	return upd, res, stop
}

// stepEnded makes a step's update and the run's result of how its Exec
// ended (r, err) or why it did not run (problem).
func (e *execution) stepEnded(ctx context.Context, idx int, st workflow.Step, name string, start time.Time,
	r executor.Result, err, problem error, log *slog.Logger) (StepUpdate, Result, bool) {
	upd := StepUpdate{Step: idx, Name: name, Duration: time.Since(start)}
	if r.Duration > 0 {
		upd.Duration = r.Duration
	}
	if r.ExitCode >= 0 && problem == nil && err == nil {
		upd.ExitCode = ptr(r.ExitCode)
	}

	if res, stopped := e.stopped(ctx); stopped {
		upd.State, upd.Reason = api.StepCancelled, res.Reason
		if res.Reason == api.ReasonTimeout {
			upd.State = api.StepFailed
		}
		return upd, res, true
	}
	switch {
	case problem != nil:
		upd.State, upd.Reason = api.StepErrored, api.ReasonWorkflowInvalid
		return upd, Result{State: api.StateErrored, Reason: api.ReasonWorkflowInvalid, Message: firstLine(problem.Error())}, true
	case err != nil:
		fmt.Fprintf(e.setup, "step %d (%s) could not be executed: %v\n", idx, name, err)
		e.setup.flush()
		upd.State, upd.Reason = api.StepErrored, api.ReasonExecutor
		return upd, Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: firstLine(err.Error())}, true
	case r.Reason == api.ReasonCancelled:
		// Nobody cancelled the run (its context is live): the step was
		// stopped by its environment, which an executor should have said.
		// Never cancelled by nobody: errored, naming what happened.
		msg := fmt.Sprintf("step %d (%s) was stopped by its environment, not by a person", idx, name)
		if r.Note != "" {
			msg += ": " + r.Note
		}
		upd.State, upd.Reason, upd.ExitCode = api.StepErrored, api.ReasonExecutor, nil
		return upd, Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: msg}, true
	case executor.EnvironmentFault(r.Reason):
		// The environment's doing, not the step's: no exit code of its
		// own, and the environment's words in the run's message.
		upd.State, upd.Reason, upd.ExitCode = api.StepErrored, r.Reason, nil
		msg := fmt.Sprintf("step %d (%s): %s", idx, name, r.Reason)
		if r.Note != "" {
			msg += ": " + firstLine(r.Note)
		}
		return upd, Result{State: api.StateErrored, Reason: r.Reason, Message: msg}, true
	case r.Reason != "":
		upd.State, upd.Reason = api.StepFailed, r.Reason
		msg := fmt.Sprintf("step %d (%s): %s", idx, name, r.Reason)
		if r.Reason == api.ReasonTimeout {
			msg = fmt.Sprintf("step %d (%s) reached its timeout of %s", idx, name, st.Timeout)
		} else if r.Note != "" {
			msg += ": " + firstLine(r.Note)
		}
		if r.Reason == api.ReasonService {
			// The run's services are gone for every later step too.
			return upd, Result{State: api.StateFailed, Reason: r.Reason, Message: msg}, true
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
func (e *execution) stopped(ctx context.Context) (Result, bool) {
	if ctx.Err() == nil {
		return Result{}, false
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errRunTimeout):
		msg := "the run reached its timeout"
		if e.timeout > 0 {
			msg = fmt.Sprintf("the run reached its timeout of %s", e.timeout)
		}
		return Result{State: api.StateFailed, Reason: api.ReasonTimeout, Message: msg}, true
	case errors.Is(cause, ErrRunnerStopped):
		return Result{State: api.StateCancelled, Reason: api.ReasonRunnerStopped, Message: cause.Error()}, true
	case errors.Is(cause, ErrRunFinished):
		return Result{State: api.StateCancelled, Reason: api.ReasonCancelled, Message: ErrRunFinished.Error()}, true
	}
	return Result{State: api.StateCancelled, Reason: api.ReasonCancelled}, true
}

// buildStep turns a workflow step into an executor step; tokens are its id
// tokens by name, which it gets like secrets. Notes for the person reading
// the log go to out. A problem (a broken shared step) means the step
// cannot run.
func (e *execution) buildStep(sess executor.Session, st workflow.Step, name string, out io.Writer, tokens map[string]string) (executor.Step, error) {
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
	for n, v := range tokens {
		secrets[n] = v
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
