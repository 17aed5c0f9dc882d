package executor

import "errors"

// ErrNotRecoverable is returned by Executor.Recover when the environment is
// gone or the executor cannot re-attach to environments at all.
var ErrNotRecoverable = errors.New("executor: environment cannot be recovered")
