package shell

import (
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// DefaultGrace is the time between SIGTERM and SIGKILL when Step.Grace is
// zero.
const DefaultGrace = agentenv.DefaultGrace

// ErrClosed is returned by Exec, CopyIn and CopyOut once Cleanup was called.
var ErrClosed = executor.ErrClosed
