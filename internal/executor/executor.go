// Package executor is the seam between the runner's core and the places a run
// executes: an Executor prepares one isolated environment per run and hands
// back a Session in which the run's steps execute one after another.
//
// Implementations live in sub-packages (shell, and later docker and kube).
// The runner's core knows only this package. An executor must never put a
// secret in a command line, a long-lived process's environment, a spec, a
// label or a log; secrets reach a step's process when the step starts.
package executor

import (
	"context"
	"io"
	"time"
)

// Executor prepares environments for runs. Its methods may be called
// concurrently for different runs.
type Executor interface {
	// Name is the executor's name as the --executor flag spells it.
	Name() string

	// Prepare makes a fresh environment for one run and returns its session.
	// The checkout is already at spec.Workspace on the runner's host; the
	// executor makes it the steps' working directory (copying it in when the
	// environment cannot see the host). On error nothing is left behind.
	// Canceling ctx aborts the preparation.
	Prepare(ctx context.Context, spec Spec) (Session, error)

	// Recover re-attaches to the environment of run id prepared by an
	// earlier process of this runner, when it is still there. It returns
	// ErrNotRecoverable when the executor cannot re-attach (the shell
	// executor never can: its processes die with the runner).
	Recover(ctx context.Context, id string) (Session, error)

	// Sweep removes environments this runner made that no live session
	// owns: those of runs not in keep (run IDs as Spec.ID). Called at start.
	Sweep(ctx context.Context, keep []string) error
}

// Spec describes the environment for one run.
type Spec struct {
	// ID identifies the run's environment, unique per runner ("run-42").
	ID string
	// Image is the workflow's image (docker, kube); the shell executor
	// ignores it and says so in the setup log.
	Image string
	// Workspace is the checkout's directory on the runner's host.
	Workspace string
	// Home is a writable directory on the runner's host the shell executor
	// uses as HOME (other executors make their own).
	Home string
	// Resources are the run's limits; zero values mean the executor's
	// defaults.
	CPUs        string // e.g. "2", "500m"
	MemoryBytes int64
	DiskBytes   int64
	// Timeout is the whole run's limit; executors with a server-side
	// deadline (kube activeDeadlineSeconds) set it from this.
	Timeout time.Duration
	// Labels identify the environment to its runner (run ID, runner name),
	// for Recover and Sweep. Never secrets.
	Labels map[string]string
	// Log receives the executor's own progress messages for the run's setup
	// log (e.g. "shell executor ignores image golang:1.26").
	Log io.Writer
}

// Step is one step to execute in a session.
type Step struct {
	// Name is the step's name, for logs.
	Name string
	// Script is the step's script, byte-exact. It never appears in argv.
	Script string
	// Shell is the interpreter and its flags, e.g. ["/bin/sh", "-e"]
	// (the default when empty) or ["bash", "-eo", "pipefail"]. The script's
	// path is appended as the last argument.
	Shell []string
	// Env holds plain variables, byte-exact (no expansion). Together with
	// Secrets it is the step's whole environment; the runner's own
	// environment never leaks in.
	Env map[string]string
	// Secrets holds the secret values the step asked for, by name. They
	// become environment variables of the step's process only.
	Secrets map[string]string
	// Timeout bounds the step; 0 means none (the run's context still
	// bounds it).
	Timeout time.Duration
	// Grace is how long a process has between SIGTERM and SIGKILL when the
	// step is cancelled or times out; 0 means 10 s.
	Grace time.Duration
}

// Result is how a step ended.
type Result struct {
	// ExitCode is the step process's exit status: 128+N when signal N
	// killed it (as a shell reports it), -1 when it never started.
	ExitCode int
	// Reason is empty when ExitCode decides, else one of api.ReasonTimeout
	// (Step.Timeout or the context's deadline passed), api.ReasonCancelled
	// (the context was cancelled), api.ReasonOOMKilled, ...
	Reason string
	// Duration is the step's wall-clock time.
	Duration time.Duration
}

// Session is one prepared environment. Steps execute one at a time: Exec,
// CopyIn and CopyOut must not be called concurrently on one session.
// Cleanup may be called at any time, also concurrently with Exec (which then
// ends), and more than once: only the first call does work, later ones
// return nil.
type Session interface {
	// ID is Spec.ID of the run this session belongs to.
	ID() string

	// Workdir is the checkout's path as the steps see it.
	Workdir() string

	// Exec runs one step to its end and writes its combined stdout and
	// stderr to out, in order. It returns when the step's process has
	// exited and every process it started is gone. A step timeout gives
	// Result.Reason timeout; canceling ctx stops the step (SIGTERM, then
	// SIGKILL after Step.Grace) and gives Reason cancelled. err is non-nil
	// only when the step could not be executed at all.
	Exec(ctx context.Context, step Step, out io.Writer) (Result, error)

	// CopyIn copies the host file or directory src to dst inside the
	// environment (dst relative to Workdir unless absolute).
	CopyIn(ctx context.Context, src, dst string) error

	// CopyOut copies src inside the environment (relative to Workdir
	// unless absolute) to the host path dst, verifying what arrived.
	CopyOut(ctx context.Context, src, dst string) error

	// Cleanup removes the environment and everything it holds.
	// Idempotent; safe to call concurrently with Exec.
	Cleanup(ctx context.Context) error
}
