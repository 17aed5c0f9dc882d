package runner

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
)

// setUp makes the run's checkout and prepares its environment, and records
// the environment's handle. failed says that res is the run's result (or,
// with e.handedOver(), that the run was handed over). setupCtx is runCtx
// cut short by a handover.
func (e *execution) setUp(runCtx, setupCtx context.Context) (sess executor.Session, res Result, failed bool) {
	sl := e.setup
	// stop is the result of a setup that ended early: handed over, or the
	// run stopped (cancelled, timed out).
	stop := func() (Result, bool) {
		if e.handedOver() {
			return Result{}, true
		}
		return e.stopped(runCtx)
	}
	sess, what, inputsErr, prepErr := e.prepare(setupCtx, e.spec(runCtx))
	if inputsErr != nil {
		if res, stopped := stop(); stopped {
			return nil, res, true
		}
		sl.printf("%s%v\n", what, inputsErr)
		return nil, Result{State: api.StateErrored, Reason: api.ReasonCheckout, Message: firstLine(inputsErr.Error())}, true
	}
	if prepErr != nil {
		if res, stopped := stop(); stopped {
			return nil, res, true
		}
		if f := (*executor.Fault)(nil); errors.As(prepErr, &f) && f.Message != "" {
			// Its own words, without the layers that wrapped them.
			sl.printf("the %s executor could not prepare the run: %s\n", e.ex.Name(), f.Message)
		} else {
			sl.printf("the %s executor could not prepare the run: %v\n", e.ex.Name(), prepErr)
		}
		if f := (*executor.Fault)(nil); errors.As(prepErr, &f) && f.Reason != "" {
			state := api.StateErrored
			if !executor.EnvironmentFault(f.Reason) {
				state = api.StateFailed
			}
			return nil, Result{State: state, Reason: f.Reason, Message: firstLine(f.Message)}, true
		}
		return nil, Result{State: api.StateErrored, Reason: api.ReasonExecutor, Message: firstLine(prepErr.Error())}, true
	}
	if e.journal != nil {
		if err := e.journal.RecordSession(sess.Handle()); err != nil {
			e.log.Warn("could not record the run's environment: a restarted runner cannot take this run over", "err", err)
		}
	}
	return sess, Result{}, false
}

// spec is what the executor prepares for the run: its workflow's image,
// architecture, resources and services, its workspace and labels, and the
// time left of its timeout (runCtx's deadline).
func (e *execution) spec(runCtx context.Context) executor.Spec {
	id := e.job.ID
	if id == "" {
		id = "run-" + strconv.FormatInt(e.job.Run, 10)
	}
	wf := e.wf
	return executor.Spec{
		ID:          id,
		Image:       wf.Image,
		Arch:        wf.Arch,
		Workspace:   e.job.Workspace,
		CPUs:        wf.Resources.CPUs,
		MemoryBytes: wf.Resources.MemoryBytes,
		DiskBytes:   wf.Resources.DiskBytes,
		Timeout:     timeLeft(runCtx),
		Labels:      e.job.Labels,
		Log:         e.setup,
		Services:    e.serviceSpecs(),

		ContainerBuilds: wf.ContainerBuilds,
	}
}

// prepare fills the workspace (the checkout, then what the needed runs
// left) and prepares the environment of spec. Both go on at once
// (Prepare reads nothing of the checkout: executor.Executor.Prepare): the
// environment starts (a shell agent, a pod) while the commit is fetched;
// what Prepare writes for the setup log is held until the
// checkout's lines are in, so the log reads as if one came after the
// other, and an environment made early for a checkout that failed is
// removed. inputsErr (what says which part failed, for the setup log) or
// prepErr says why there is no session.
func (e *execution) prepare(ctx context.Context, spec executor.Spec) (sess executor.Session, what string, inputsErr, prepErr error) {
	inputs := func() (string, error) {
		if e.job.Checkout != nil {
			if err := e.job.Checkout(ctx, e.wf.Checkout, e.setup); err != nil {
				return "checkout failed: ", err
			}
		}
		return "", e.receiveNeeds(ctx)
	}
	early := false
	if e.job.Checkout != nil {
		early = os.MkdirAll(e.job.Workspace, 0o755) == nil
	}
	if !early {
		if what, err := inputs(); err != nil {
			return nil, what, err, nil
		}
		sess, prepErr = e.ex.Prepare(ctx, spec)
		if prepErr == nil {
			e.envLeft = true
		}
		return sess, "", nil, prepErr
	}
	prepCtx, cancelPrep := context.WithCancel(ctx)
	defer cancelPrep()
	var prepLog syncbuf.Buffer
	spec.Log = &prepLog
	prepared := make(chan struct{})
	go func() {
		defer close(prepared)
		sess, prepErr = e.ex.Prepare(prepCtx, spec)
	}()
	if what, err := inputs(); err != nil {
		cancelPrep()
		<-prepared
		if prepErr == nil {
			e.envLeft = true
			e.cleanUp(sess)
		}
		return nil, what, err, nil
	}
	<-prepared
	_, _ = e.setup.Write(prepLog.Bytes())
	e.setup.flush()
	if prepErr == nil {
		e.envLeft = true
	}
	return sess, "", nil, prepErr
}

// timeLeft is the time until ctx's deadline (0 when it passed), or 0 when
// it has none.
func timeLeft(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(d), 0)
}

// cleanUp removes an environment the run will not use.
func (e *execution) cleanUp(sess executor.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := sess.Cleanup(ctx); err != nil {
		e.log.Error("clean up session", "err", err)
		return
	}
	e.envLeft = false
}

// serviceSpecs are the workflow's services for the executor, each with the
// values of the secrets it asks for (a secret with no value for this run
// is left out, and the setup log says so, as for a step).
func (e *execution) serviceSpecs() []executor.Service {
	var out []executor.Service
	for _, s := range e.wf.Services {
		secrets := map[string]string{}
		for _, n := range s.Secrets {
			if v, ok := e.job.Secrets[n]; ok {
				secrets[n] = v
			} else {
				e.setup.printf("secret %s has no value for this run; service %s starts without it\n", n, s.Name)
			}
		}
		out = append(out, executor.Service{
			Name: s.Name, Image: s.Image, Env: s.Env, Command: s.Command, Secrets: secrets,
			Ports: s.Ports, Ready: s.Ready, ReadyTimeout: s.ReadyTimeout,
			CPUs: s.Resources.CPUs, MemoryBytes: s.Resources.MemoryBytes, DiskBytes: s.Resources.DiskBytes,
		})
	}
	return out
}

// serviceLogMax is how much of each service's log the setup log gets (its
// end), in bytes.
const serviceLogMax = 256 << 10

// serviceLogs adds the log of each of the workflow's services to the
// setup log (masked as all of it is), once the steps ended and before the
// environment is removed: a service's log is read where the run's setup
// is (`knotless logs RUN`, the web view's setup step).
func (e *execution) serviceLogs(ctx context.Context, sess executor.Session) {
	sl, ok := sess.(executor.ServiceLogger)
	if !ok || e.wf == nil {
		return
	}
	for _, s := range e.wf.Services {
		b, err := sl.ServiceLog(ctx, s.Name, serviceLogMax)
		if err != nil {
			e.setup.printf("--- service %s: its log could not be read: %v\n", s.Name, err)
			continue
		}
		e.setup.printf("--- service %s: its log (the last %d KiB at most) ---\n", s.Name, serviceLogMax>>10)
		_, _ = e.setup.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			e.setup.printf("\n")
		}
		e.setup.printf("--- end of service %s's log ---\n", s.Name)
	}
	e.setup.flush()
}
