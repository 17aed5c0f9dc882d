// Package executor is the seam between the runner's core and the places a run
// executes: an Executor prepares one isolated environment per run and hands
// back a Session in which the run's steps execute one after another.
//
// Implementations live in sub-packages: shell, docker and kube, which
// share one layer (agentenv: each writes only how its environment is
// made, found, attached to and why it stopped). The optional capabilities
// an executor or a session may have are listed in capabilities.go; the
// command line's seam (Options, the shared JobFlags) is options.go. The
// runner's core knows only this package. An executor must never put a
// secret in a command line, a long-lived process's environment, a spec, a
// label or a log; secrets reach a step's process when the step starts.
//
// Environments outlive the runner process: a step goes on while the runner
// restarts, and a new runner process Recovers the session from its Handle
// and attaches to the step where it left off. What the runner hands an
// executor is executor-neutral: a self-contained checkout (no link to a host
// path), no HOME of its choosing (each executor makes one inside the
// environment), and DefaultShell for steps that name none.
package executor

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"time"

	"knotless.dev/knotless/internal/api"
)

// Setup is what the runner gives every executor it makes, from its own
// command line.
type Setup struct {
	// Work is the runner's work directory; an executor keeps its files in
	// Work/<its name>.
	Work string
	// Runner is the runner's name (its state's), which executors put on
	// what they make so that Sweep finds it; "exec" for `knotless-run
	// exec`.
	Runner string
	// Agent is the step agent program (knotless-agent) to run or copy into
	// environments; empty means the one beside the running program, else
	// the one in PATH.
	Agent string
	// Logger is the runner's logger.
	Logger *slog.Logger
	// Ephemeral says no process will ever take the environments over
	// (`knotless-run exec`): they end with the process that made them, also
	// when it is killed.
	Ephemeral bool
	// Job is what the shared job flags say (JobFlags), for executors
	// whose Options.UsesJob.
	Job Job
	// Observer, when set, is told of environments made and removed and of
	// agent reconnects (knotless-run's metrics).
	Observer Observer
	// Capacity is how many runs the runner executes at once (0 for
	// `knotless-run exec` and doctor): an executor that keeps
	// environments ready ahead of claims never makes more than it allows.
	Capacity int
}

// DefaultShell runs a step's script when Step.Shell is empty: a POSIX shell
// that stops at the first failing command. The script's path is appended.
var DefaultShell = []string{"/bin/sh", "-e"}

// Executor prepares environments for runs.
//
// Every method may be called concurrently with every other, for different
// run IDs. ctx bounds the call only: canceling it aborts the call, never an
// environment that the call already handed out.
type Executor interface {
	// Name is the executor's name as the --executor flag spells it.
	Name() string

	// Prepare makes a fresh environment for one run and returns its session.
	// spec.Workspace is the run's checkout on the runner's host, an
	// existing directory that may still be being filled: the runner makes
	// the checkout while Prepare runs, so that the environment's start (a
	// pod's, a container's) overlaps the fetch. So Prepare reads nothing of
	// it: it makes it the steps' working directory, and an environment that
	// cannot see the host gets it copied in at the session's first Exec,
	// CopyIn or CopyOut, which come only after the checkout is complete. If
	// the checkout fails, the runner cleans the session up. Prepare writes
	// to spec.Log what the environment is and which of spec it ignores.
	//
	// Not idempotent: each call makes a new environment. On error nothing is
	// left behind (no process, container, pod or file of the environment),
	// and the run ends errored/executor. Canceling ctx aborts the
	// preparation with the same guarantee.
	Prepare(ctx context.Context, spec Spec) (Session, error)

	// Recover re-attaches to the environment h describes (a Session's Handle,
	// recorded by an earlier runner process or by this one). Recovering never
	// changes what runs there: a running step goes on, a step that ended
	// while nobody was attached keeps its true result for Exec to report.
	//
	// It returns an error wrapping ErrNotRecoverable when the environment is
	// gone, belongs to another executor, or cannot be re-attached at all;
	// other errors are transient and the caller may retry. Recovering the
	// same handle twice gives two sessions on one environment: the caller
	// uses one at a time and Detaches the other.
	Recover(ctx context.Context, h Handle) (Session, error)

	// Sweep removes every environment this executor made for this runner
	// (found by its labels or its directory, also after a crash) whose ID is
	// not in keep (IDs as Spec.ID) and that no live session of this
	// Executor value holds: processes, containers, pods and files. It never
	// removes what Recover can still attach to and the runner wants: the
	// runner calls it at start only after it has recovered every run it
	// takes over, with exactly those in keep. Idempotent; a failure to
	// remove one environment does not stop the others (errors are joined).
	Sweep(ctx context.Context, keep []string) error
}

// Handle locates one environment so that a later runner process can Recover
// it (as a Nomad task handle does). The runner records it in its journal as
// JSON; Data belongs to the executor and is opaque to everyone else. A
// handle never holds a secret.
type Handle struct {
	// Executor is the Name of the executor that made the environment.
	Executor string `json:"executor"`
	// ID is the environment's Spec.ID.
	ID string `json:"id"`
	// Data is the executor's own description (a directory, a pod's name
	// and UID, ...).
	Data json.RawMessage `json:"data,omitempty"`
}

// Spec describes the environment for one run.
type Spec struct {
	// ID identifies the run's environment, unique per runner ("run-42"):
	// 1-63 of a-z, A-Z, 0-9, '.', '_' and '-', starting with a letter or
	// digit, so that it fits a directory, a container or a pod name.
	ID string
	// Image is the workflow's image (docker, kube); the shell executor
	// ignores it and says so in the setup log.
	Image string
	// Arch is the architecture the workflow asks for (`arch:`, GOARCH
	// names such as arm64), "" for any: kube runs the pod on such a node
	// (nodeSelector kubernetes.io/arch); shell and docker run only on a
	// host of it, else Prepare fails naming both.
	Arch string
	// Workspace is the checkout's directory on the runner's host. It is
	// self-contained (its .git needs nothing outside it).
	Workspace string
	// Resources are the run's limits; zero values mean the executor's
	// defaults. CPUs as Kubernetes quantities ("2", "500m"), sizes in bytes.
	CPUs        string
	MemoryBytes int64
	DiskBytes   int64
	// Timeout is the whole run's limit, counted from Prepare. Executors
	// enforce it inside the environment too (the shell executor's agent,
	// kube's activeDeadlineSeconds), so that a run whose runner is gone
	// still ends.
	Timeout time.Duration
	// Labels identify the environment to its runner (run ID, runner name),
	// for Recover and Sweep. Never secrets.
	Labels map[string]string
	// Log receives the executor's own progress messages for the run's setup
	// log (e.g. "shell executor ignores image golang:1.26").
	Log io.Writer
	// Services are the workflow's services (`services:`), started before
	// Prepare returns and ready by their probes; Prepare fails with a
	// *Fault (reason api.ReasonService, or image-pull) naming the one
	// that could not start. Executors that run no images refuse them.
	Services []Service
	// ContainerBuilds is the workflow's `container-builds: true`: the
	// steps build container images. A kube executor whose operator
	// allowed builds gives the pod a builder (docs/container-builds.md);
	// every other executor that runs images refuses it (a *Fault of
	// reason executor naming the flag) before any pod or container
	// exists; the shell executor says the host's own tools build.
	ContainerBuilds bool
}

// Service is one service of a run: a container of its own image beside
// the job's, sharing its network namespace (the steps reach it at
// 127.0.0.1), hardened as the job's container is.
type Service struct {
	// Name is the service's name (workflow.Service.Name): a DNS label of
	// at most 30 characters.
	Name  string
	Image string
	// Env holds plain variables: they are in the container's spec.
	Env map[string]string
	// Command, when set, replaces the image's entrypoint and command.
	Command []string
	// Secrets are values by name that the service's command gets as
	// variables. They never appear in a spec: the executor starts the
	// command through the image's /bin/sh, which waits for them on a file
	// of a memory file system that only this container mounts, written
	// over an exec's STDIN (ServiceSecretsDir).
	Secrets map[string]string
	// Ports are TCP ports of 127.0.0.1 that must accept connections
	// (probed from the job's container) before the service is ready.
	Ports []int
	// Ready, when set, is a shell command run in the service's container
	// (/bin/sh -c) until it exits 0.
	Ready string
	// ReadyTimeout bounds the wait for readiness, counted from when the
	// probes begin; 0 means 2 minutes.
	ReadyTimeout time.Duration
	// CPUs, MemoryBytes and DiskBytes are its limits (requests equal
	// them); zero values mean DefaultServiceResources.
	CPUs        string
	MemoryBytes int64
	DiskBytes   int64
}

// DefaultServiceResources are a service's limits when the workflow gives
// none: 1 CPU, 512 MiB of memory, 1 GiB of disk (its /tmp).
var DefaultServiceResources = Resources{MilliCPUs: 1000, Memory: 512 << 20, Disk: 1 << 30}

// ServiceSecretsDir is where a service that asks for secrets finds them
// (a memory file system only its container mounts): the file env there,
// `export NAME='value'` lines, which its /bin/sh sources and removes
// before it execs the service's command.
const ServiceSecretsDir = "/knotless-service"

// Step is one step to execute in a session.
type Step struct {
	// ID names the step within its session, unique and stable across runner
	// restarts (the runner uses the step's index, "1", "2", ...). An
	// environment starts a given ID at most once: Exec with an ID it has
	// started already attaches to that step instead, and Script, Shell,
	// Env, Secrets and Timeout are then ignored.
	ID string
	// Offset is how many bytes of the step's output the caller has already
	// consumed (after a restart); Exec writes the output from that byte on.
	// 0 for a new step.
	Offset int64
	// Name is the step's name, for logs.
	Name string
	// Script is the step's script, byte-exact. It never appears in argv.
	Script string
	// Shell is the interpreter and its flags, e.g. ["bash", "-eo",
	// "pipefail"]; empty means DefaultShell. The script's path is appended
	// as the last argument.
	Shell []string
	// Env holds plain variables, byte-exact (no expansion). Together with
	// Secrets it is the step's whole environment (the executor adds PATH and
	// HOME when Env has none); the runner's own environment never leaks in.
	Env map[string]string
	// Secrets holds the secret values the step asked for, by name. They
	// become environment variables of the step's process only, and travel
	// to the environment only inside the stream that starts the step.
	Secrets map[string]string
	// Timeout bounds the step; 0 means none (the run's context and
	// Spec.Timeout still bound it). Enforced inside the environment, so it
	// holds while no runner is attached.
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
	// Reason is empty when ExitCode decides, else why the step ended:
	// api.ReasonTimeout (Step.Timeout, Spec.Timeout or ctx's deadline),
	// api.ReasonCancelled (ctx cancelled, or Cleanup), or a reason of the
	// environment such as api.ReasonOOMKilled or api.ReasonEvicted.
	// EnvironmentFault tells which of them make a run errored rather than
	// failed.
	Reason string
	// Duration is the step's wall-clock time as the environment measured
	// it (from its start, also when Exec attached later).
	Duration time.Duration
	// Note is a line about the step's end from the environment for the
	// step's log, empty when all went as expected (e.g. "some of the step's
	// processes did not die after SIGKILL"). It is not part of the output,
	// whose byte offsets it would shift.
	Note string
	// OutputLost is set when the environment could not keep all of the
	// step's output (a full disk; Note says what failed): the runner does
	// not let such a step read as a clean success.
	OutputLost bool
}

// EnvironmentFault reports whether a step that ended for reason was let
// down by its environment (the run ends errored: evicted, the image could
// not be pulled, the environment vanished, the runner was lost) rather than
// by its own doing (failed: exit code, timeout, out of memory under its own
// limit) or by a person (cancelled). api.ReasonUnsupported is one too
// (the runner cannot give what the workflow asks), though never a
// transient one: workflow.RetryReasons are the others.
func EnvironmentFault(reason string) bool {
	switch reason {
	case api.ReasonEvicted, api.ReasonPreempted, api.ReasonImagePull, api.ReasonExecutor, api.ReasonRunnerLost,
		api.ReasonUnschedulable, api.ReasonPodLost, api.ReasonUnsupported:
		return true
	}
	return false
}

// Session is one prepared (or recovered) environment.
//
// Faults: Exec's error means the environment let the step down before or
// while it ran (the run ends errored/executor); a Result.Reason for which
// EnvironmentFault holds (evicted, image-pull) ends it errored with that
// reason; an exit code, a timeout or oom-killed are the step's own doing
// (failed); cancelled is a person's or the runner's (cancelled).
//
// Steps execute one at a time: Exec, CopyIn and CopyOut must not be called
// concurrently on one session. Detach and Cleanup may be called at any time,
// also concurrently with Exec, and more than once: only the first call of
// either does work.
type Session interface {
	// ID is Spec.ID of the run this session belongs to.
	ID() string

	// Handle describes the environment for Recover. It is valid as soon as
	// Prepare returns, and stays the same for the session's life.
	Handle() Handle

	// Workdir is the checkout's path as the steps see it.
	Workdir() string

	// Exec runs step to its end, or attaches to it when the environment
	// started step.ID already, and writes the step's combined stdout and
	// stderr to out, in order, from byte step.Offset on. It returns when
	// the step's process has exited and every process it started is gone.
	//
	// A dropped connection to the environment does not end the step: Exec
	// reconnects and resumes at the next byte, nothing lost or doubled; an
	// out that is an agent.Resumer is told where and why, first. A
	// step timeout gives Reason timeout; canceling ctx stops the step
	// (SIGTERM, then SIGKILL after Step.Grace) and gives Reason cancelled
	// (timeout when ctx's deadline passed). Cleanup during Exec ends it
	// with Reason cancelled. Detach during Exec returns ErrDetached at once
	// and leaves the step running.
	//
	// err is non-nil when the step could not be executed at all (ExitCode
	// -1: a bad variable name, the environment is gone or unreachable) and
	// when writing to out failed (the step still ran to its end and Result
	// is valid).
	Exec(ctx context.Context, step Step, out io.Writer) (Result, error)

	// CopyIn copies the host file or directory src to dst inside the
	// environment (dst relative to Workdir unless absolute), keeping modes,
	// times and symbolic links, and verifying what arrived.
	CopyIn(ctx context.Context, src, dst string) error

	// CopyOut copies src inside the environment (relative to Workdir
	// unless absolute) to the host path dst, verifying what arrived.
	// A directory is copied with everything below it; symbolic links are
	// copied as links, never followed, and a relative src may not lead out
	// of Workdir through one. A src that does not exist is an error
	// wrapping fs.ErrNotExist, and dst is left untouched (the runner's
	// `outputs:` collection reports such a path instead of failing). The
	// shared suite (executortest) pins each of these.
	CopyOut(ctx context.Context, src, dst string) error

	// Detach lets go of the environment without stopping it: a running step
	// goes on, and a running Exec returns ErrDetached. The runner detaches
	// every session when it hands its runs over to its successor. Later
	// calls of any method but Detach and Cleanup fail with ErrDetached.
	Detach() error

	// Cleanup removes the environment and everything it holds, killing a
	// running step at once. Idempotent; safe to call concurrently with
	// Exec. After Detach it still removes the environment.
	Cleanup(ctx context.Context) error
}

// ReasonStopped is the Result.Reason of a detached step that
// StopDetached stopped (at the run's end, as asked): not a failure.
const ReasonStopped = "stopped"

// DetachedSteps is implemented by a Session whose environment can run a
// step beside the steps after it: a workflow step with `detach: true` (a
// service such as a database the later steps talk to). Every session over
// the step agent has it (shell, kube, docker). The methods follow the
// Session's rule: not concurrently with Exec, CopyIn, CopyOut or each
// other.
type DetachedSteps interface {
	// StartDetached starts step (its ID as for Exec; Offset is ignored)
	// and returns once it runs, without its output. A later step's end
	// leaves its processes alone. Exec with the same ID attaches to it:
	// it writes the output from step.Offset on and returns when the step
	// has ended. Starting an ID the environment started already changes
	// nothing. An error means it did not start (errored/executor).
	StartDetached(ctx context.Context, step Step) error
	// DetachedRunning reports whether the step with id still runs.
	DetachedRunning(ctx context.Context, id string) (bool, error)
	// StopDetached stops the step with id: SIGTERM to its processes,
	// SIGKILL after grace (0: at once); its Result.Reason is then
	// ReasonStopped, unless it had ended already. It returns once the
	// request is made; Exec (attaching) waits for the end.
	StopDetached(ctx context.Context, id string, grace time.Duration) error
}
