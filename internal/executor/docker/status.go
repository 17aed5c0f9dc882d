package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
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
