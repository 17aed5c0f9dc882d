package executor

import "errors"

// ErrNotRecoverable is returned (wrapped) by Executor.Recover when the
// environment is gone or the executor cannot re-attach to it at all.
var ErrNotRecoverable = errors.New("executor: environment cannot be recovered")

// ErrDetached is returned by a session's methods once Detach was called: the
// environment goes on without this session.
var ErrDetached = errors.New("executor: session detached")

// ErrClosed is returned by a session's methods once Cleanup was called.
var ErrClosed = errors.New("executor: session cleaned up")
