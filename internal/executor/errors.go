package executor

import (
	"errors"

	"knotless.dev/knotless/internal/agent"
)

// ErrNotRecoverable is returned (wrapped) by Executor.Recover when the
// environment is gone or the executor cannot re-attach to it at all.
var ErrNotRecoverable = errors.New("executor: environment cannot be recovered")

// ErrDetached is returned by a session's methods once Detach was called: the
// environment goes on without this session.
var ErrDetached = errors.New("executor: session detached")

// ErrClosed is returned by a session's methods once Cleanup was called.
var ErrClosed = errors.New("executor: session cleaned up")

// ErrEnvironmentGone is wrapped by the errors of a session's methods
// whose environment is gone (a job pod deleted, a container removed): its
// step agent cannot be reached any more. It is agent.ErrGone, which the
// agent-based executors' sessions wrap.
var ErrEnvironmentGone = agent.ErrGone

// Fault is an error of an environment that knows why the run cannot go
// on: Reason is the run's reason (an api.Reason* value such as image-pull,
// unschedulable, pod-lost, or executor) and Message what a person can act
// on (the kubelet's or the scheduler's own words). The runner ends the run
// errored with Reason when EnvironmentFault(Reason) holds, else failed.
type Fault struct {
	Reason  string
	Message string
}

func (f *Fault) Error() string { return f.Reason + ": " + f.Message }
