package docker

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentsession"
)

// containerFault reads why container id can no longer run steps, from
// the engine; nil while it runs (or cannot be read). The order follows
// what engines report wrongly elsewhere: State.OOMKilled is oom-killed
// whatever the exit code; a container that is gone or ended any other way
// is errored/executor, never a success.
func (e *Executor) containerFault(ctx context.Context, id string) *executor.Fault {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	st, err := e.api.ContainerInspect(ctx, id)
	if errdefs.IsNotFound(err) {
		return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("the job container %s is gone (removed from outside the runner?)", short(id))}
	}
	if err != nil || st.State == nil {
		return nil
	}
	if st.State.OOMKilled {
		return &executor.Fault{Reason: api.ReasonOOMKilled, Message: fmt.Sprintf("the job container was killed for exceeding its memory limit (exit code %d)", st.State.ExitCode)}
	}
	if st.State.Running && !st.State.Restarting {
		return nil
	}
	return &executor.Fault{Reason: api.ReasonExecutor, Message: stateMessage(st)}
}

// stateMessage says how a container that does not run ended.
func stateMessage(st container.InspectResponse) string {
	s := st.State
	if s == nil {
		return fmt.Sprintf("the job container %s has no state", short(st.ID))
	}
	msg := fmt.Sprintf("the job container %s is %s (exit code %d", short(st.ID), s.Status, s.ExitCode)
	if s.OOMKilled {
		msg += ", OOMKilled"
	}
	msg += ")"
	if s.Error != "" {
		msg += ": " + s.Error
	}
	return msg
}

// faultResult is the Result of a step its container let down.
func faultResult(f *executor.Fault) executor.Result {
	code := -1
	if f.Reason == api.ReasonOOMKilled {
		code = 137
	}
	return executor.Result{ExitCode: code, Reason: f.Reason, Note: f.Message}
}

// session is the agent session of one job container, with one
// correction, as on kube: the agent (PID 1) stops the running step with
// reason cancelled whenever it shuts down, also when the engine sends it
// SIGTERM because the container is being stopped or removed from
// outside. A step that ends cancelled although neither the caller's ctx
// nor Cleanup asked for it was stopped by the environment: its Result
// takes the container's own reason, never cancelled.
type session struct {
	*agentsession.Session
	e       *Executor
	id      string
	pids    int64
	cleaned atomic.Bool
}

// wrap returns s as the docker executor hands it out.
func (e *Executor) wrap(s *agentsession.Session) executor.Session {
	var d handleData
	_ = jsonUnmarshal(s.Handle().Data, &d)
	return &session{Session: s, e: e, id: d.Container, pids: e.cfg.Pids}
}

// Cleanup notes that a cancellation from now on is the runner's own.
func (s *session) Cleanup(ctx context.Context) error {
	s.cleaned.Store(true)
	return s.Session.Cleanup(ctx)
}

// Exec is agentsession.Session.Exec; a step cancelled by nobody gets the
// container's reason, and a failed step that hit the process limit says
// so in its Note.
func (s *session) Exec(ctx context.Context, step executor.Step, out io.Writer) (executor.Result, error) {
	before := s.e.pidsRefused(s.id)
	res, err := s.Session.Exec(ctx, step, out)
	if err == nil && res.Reason == api.ReasonCancelled && ctx.Err() == nil && !s.cleaned.Load() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if f := s.e.containerFault(context.Background(), s.id); f != nil {
				res = faultResult(f)
				break
			}
			if time.Now().After(deadline) {
				res.Reason, res.Note = api.ReasonExecutor, "the step agent stopped the step though nobody cancelled it: the container's PID 1 was signalled (stopped from outside the runner?)"
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if err != nil && ctx.Err() == nil && !s.cleaned.Load() {
		// A container stopped under the step can fail the agent's
		// reconnection before anything says why: the engine answers the
		// new exec inside its stream ("cannot exec in a stopped state"),
		// which reads as a protocol error. The container's state says why
		// (looked at for 2 s: a running container has no fault to wait for).
		deadline := time.Now().Add(2 * time.Second)
		for {
			if f := s.e.containerFault(context.Background(), s.id); f != nil {
				return faultResult(f), nil
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if err == nil && s.pids > 0 {
		if n := s.e.pidsRefused(s.id) - before; n > 0 {
			note := fmt.Sprintf("the step reached the container's process limit (--pids %d): %d process creations were refused", s.pids, n)
			res.Note = strings.TrimSpace(res.Note + "; " + note)
			res.Note = strings.TrimPrefix(res.Note, "; ")
		}
	}
	return res, err
}
