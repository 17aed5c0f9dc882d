// Package agentsession is the executor.Session of every executor whose
// environment runs a step agent (internal/stepagent) reached over the
// agent protocol (internal/agent): the shell executor (a Unix socket on
// the host) and the kube executor (an exec stream into the pod). What
// differs between them (how the environment is removed, what a lost
// connection means) are hooks of Config.
package agentsession

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// DefaultGrace is the time between SIGTERM and SIGKILL when Step.Grace is
// zero.
const DefaultGrace = 10 * time.Second

// Config describes one session.
type Config struct {
	// Executor is the executor's name, for errors ("shell", "kube").
	Executor string
	// ID is the run's Spec.ID.
	ID string
	// Handle is what Session.Handle returns.
	Handle executor.Handle
	// Workdir is the checkout's path as the steps see it.
	Workdir string
	// Client talks to the environment's agent.
	Client *agent.Client
	// Ready, when set, runs once before the first Exec, CopyIn or CopyOut
	// (the kube executor copies the checkout in there); its error fails
	// that call and every later one.
	Ready func(ctx context.Context) error
	// Fault, when set, is asked about an error of the agent client during
	// Exec: when the environment itself let the step down (the pod was
	// OOM-killed, evicted, deleted), it returns the step's Result (its
	// Reason says why, Note the details) and true; the Exec then returns
	// that Result and no error.
	Fault func(err error) (executor.Result, bool)
	// Remove removes the environment (Cleanup): it ends the agent and
	// every step process (through Client, still open, or otherwise), then
	// removes the session directory, the pod. Required.
	Remove func(ctx context.Context) error
	// Forget tells the executor that the session is over (Cleanup,
	// Detach); may be nil.
	Forget func()
	// HostPath, when set, maps a path as the steps see it (absolute) to
	// the same file on the runner's host and the host directory it must
	// stay in (the checkout, HOME), and reports false for paths the host
	// does not see. Caches then move by the host's file system
	// (cache.CopyTree, cache.MoveTree) instead of through the agent, and
	// never through a symbolic link below root.
	HostPath func(p string) (host, root string, ok bool)
	// HostChown, when set, is called on what a host restore made (a file
	// or a tree), to give it to the environment's user (the docker
	// executor's bind-mounted checkout).
	HostChown func(host string) error
}

// Session is an executor.Session over a step agent.
type Session struct {
	cfg Config

	mu        sync.Mutex
	closed    bool
	detached  bool
	closing   chan struct{} // closed by the first Cleanup
	detaching chan struct{} // closed by the first Detach
	execDone  chan struct{} // non-nil while an operation runs; closed when it returns

	readyOnce sync.Once
	readyErr  error
}

var _ executor.Session = (*Session)(nil)

// New returns the session cfg describes. It does not connect.
func New(cfg Config) *Session {
	return &Session{cfg: cfg, closing: make(chan struct{}), detaching: make(chan struct{})}
}

var anonSeq atomic.Int64

// ID returns Spec.ID.
func (s *Session) ID() string { return s.cfg.ID }

// Workdir returns the checkout's path as the steps see it.
func (s *Session) Workdir() string { return s.cfg.Workdir }

// Handle returns Config.Handle.
func (s *Session) Handle() executor.Handle { return s.cfg.Handle }

// Client returns the session's agent client.
func (s *Session) Client() *agent.Client { return s.cfg.Client }

// begin marks an operation as running. It fails after Cleanup or Detach and
// while another operation runs.
func (s *Session) begin(ctx context.Context) (chan struct{}, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, executor.ErrClosed
	case s.detached:
		s.mu.Unlock()
		return nil, executor.ErrDetached
	case s.execDone != nil:
		s.mu.Unlock()
		return nil, errors.New("another step or copy is running in this session")
	}
	done := make(chan struct{})
	s.execDone = done
	s.mu.Unlock()
	if s.cfg.Ready != nil {
		s.readyOnce.Do(func() { s.readyErr = s.cfg.Ready(ctx) })
		if s.readyErr != nil {
			s.end(done)
			return nil, s.readyErr
		}
	}
	return done, nil
}

func (s *Session) end(done chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(done)
	s.execDone = nil
}

// Exec starts the step in the agent (or attaches to it, when the agent
// started step.ID already) and copies its output to out from step.Offset
// on. The agent writes the script to a private 0700 file and starts
// Step.Shell (default executor.DefaultShell) with its path as the last
// argument, in the checkout, in a new process group, with stdin from
// /dev/null and stdout and stderr on one pipe. The environment is exactly
// Step.Env plus Step.Secrets (a secret wins over a variable of the same
// name), plus PATH and HOME of the agent when absent; the secrets travel
// to the agent inside the Start message and are never written down.
//
// When the shell exits, the agent kills every process the step left.
// Step.Timeout (enforced by the agent, also while no runner is attached)
// and the end of ctx stop the step: SIGTERM to all of its processes,
// SIGKILL after Step.Grace (default DefaultGrace); Reason is then
// api.ReasonTimeout (Step.Timeout, or ctx's deadline) or
// api.ReasonCancelled. Cleanup during Exec kills at once (Reason
// cancelled); Detach returns executor.ErrDetached at once and leaves the
// step running. A dropped connection to the agent is redialed and the
// output resumed at the next byte. When the agent cannot be reached and
// Config.Fault says the environment failed, its Result is returned.
//
// err is non-nil when the step could not be started (bad shell, bad
// variable name, a NUL byte in a value, session cleaned up; ExitCode is
// then -1), when the agent is gone, and when writing to out failed (the
// step still ran to its end). A ctx already ended gives its Reason,
// ExitCode -1 and no error.
func (s *Session) Exec(ctx context.Context, step executor.Step, out io.Writer) (executor.Result, error) {
	res := executor.Result{ExitCode: -1}
	done, err := s.begin(ctx)
	if err != nil {
		return res, fmt.Errorf("run step %q: %w", step.Name, err)
	}
	defer s.end(done)
	if err := ctx.Err(); err != nil {
		res.Reason = api.ReasonCancelled
		if errors.Is(err, context.DeadlineExceeded) {
			res.Reason = api.ReasonTimeout
		}
		return res, nil
	}
	if out == nil {
		out = io.Discard
	}
	req := startRequest(step)
	id := req.ID
	grace := time.Duration(req.GraceMS) * time.Millisecond

	// follow ends only on Detach; stopping the step goes through the agent.
	follow, abort := context.WithCancel(context.Background())
	defer abort()
	stop := make(chan agent.Stop, 2)
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		ctxDone, closing := ctx.Done(), s.closing
		for {
			select {
			case <-ctxDone:
				ctxDone = nil
				reason := api.ReasonCancelled
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					reason = api.ReasonTimeout
				}
				stop <- agent.Stop{ID: id, Reason: reason, GraceMS: grace.Milliseconds()}
			case <-closing:
				closing = nil
				stop <- agent.Stop{ID: id, Reason: api.ReasonCancelled, GraceMS: 0}
				if s.cfg.Fault != nil {
					// Cleanup removes the environment: nothing to follow.
					go func() {
						select {
						case <-time.After(5 * time.Second):
							abort()
						case <-watchDone:
						}
					}()
				}
			case <-s.detaching:
				abort()
				return
			case <-watchDone:
				return
			}
		}
	}()

	ex, err := s.cfg.Client.RunStep(follow, req, out, stop)
	if err != nil {
		if s.isDetached() {
			return res, fmt.Errorf("run step %q: %w", step.Name, executor.ErrDetached)
		}
		if s.isClosed() {
			return executor.Result{ExitCode: -1, Reason: api.ReasonCancelled}, nil
		}
		if s.cfg.Fault != nil {
			if r, ok := s.cfg.Fault(err); ok {
				return r, nil
			}
		}
		var ae *agent.Error
		if errors.As(err, &ae) {
			return res, fmt.Errorf("run step %q: %s", step.Name, ae.Message)
		}
		return res, fmt.Errorf("run step %q: %w", step.Name, err)
	}
	if ex.Error != "" {
		return res, fmt.Errorf("run step %q: %s", step.Name, ex.Error)
	}
	res = executor.Result{ExitCode: ex.ExitCode, Reason: ex.Reason, Duration: time.Duration(ex.DurationMS) * time.Millisecond, Note: ex.Note, OutputLost: ex.OutputLost}
	return res, nil
}

// startRequest is the agent's Start for step: its ID (a made-up one when
// step has none), script, shell, whole environment and limits.
func startRequest(step executor.Step) agent.Start {
	id := step.ID
	if id == "" {
		id = "anon-" + strconv.FormatInt(anonSeq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	env := make(map[string][]byte, len(step.Env)+len(step.Secrets))
	for k, v := range step.Env {
		env[k] = []byte(v)
	}
	for k, v := range step.Secrets {
		env[k] = []byte(v)
	}
	shell := step.Shell
	if len(shell) == 0 {
		shell = executor.DefaultShell
	}
	grace := step.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	return agent.Start{
		ID: id, Offset: step.Offset, Script: []byte(step.Script), Shell: shell, Env: env,
		TimeoutMS: step.Timeout.Milliseconds(), GraceMS: grace.Milliseconds(),
	}
}

var _ executor.DetachedSteps = (*Session)(nil)

// StartDetached implements executor.DetachedSteps: the agent starts the
// step (as Exec describes, secrets inside the Start message) beside the
// steps after it; its processes are its process group and cgroup.
func (s *Session) StartDetached(ctx context.Context, step executor.Step) error {
	done, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("start detached step %q: %w", step.Name, err)
	}
	defer s.end(done)
	req := startRequest(step)
	req.Offset = 0
	if err := s.cfg.Client.StartDetached(ctx, req); err != nil {
		var ae *agent.Error
		if errors.As(err, &ae) {
			return fmt.Errorf("start detached step %q: %s", step.Name, ae.Message)
		}
		return fmt.Errorf("start detached step %q: %w", step.Name, err)
	}
	return nil
}

// DetachedRunning implements executor.DetachedSteps.
func (s *Session) DetachedRunning(ctx context.Context, id string) (bool, error) {
	done, err := s.begin(ctx)
	if err != nil {
		return false, err
	}
	defer s.end(done)
	steps, err := s.cfg.Client.Steps(ctx)
	if err != nil {
		return false, err
	}
	for _, st := range steps {
		if st.ID == id {
			return st.Running, nil
		}
	}
	return false, fmt.Errorf("the step agent has no step %s", id)
}

// StopDetached implements executor.DetachedSteps.
func (s *Session) StopDetached(ctx context.Context, id string, grace time.Duration) error {
	done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer s.end(done)
	return s.cfg.Client.StopStep(ctx, agent.Stop{ID: id, Reason: executor.ReasonStopped, GraceMS: grace.Milliseconds()})
}

func (s *Session) isDetached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detached
}

func (s *Session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// CopyIn copies the host file or directory src to dst, a path relative to
// the checkout (or absolute), through the agent as a tar stream whose
// length and SHA-256 both ends compare. Directories are merged into an
// existing directory; modes (including setuid, setgid, sticky) and
// modification times are kept; symbolic links are copied as links, never
// followed. A relative dst may not leave the checkout, also not through a
// symbolic link. Every regular file's size is verified.
func (s *Session) CopyIn(ctx context.Context, src, dst string) error {
	done, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("copy %s into %s session %s: %w", src, s.cfg.Executor, s.cfg.ID, err)
	}
	defer s.end(done)
	return s.copyIn(ctx, src, dst)
}

// copyIn is CopyIn without the bookkeeping (Config.Ready uses it).
func (s *Session) copyIn(ctx context.Context, src, dst string) error {
	src = filepath.Clean(src)
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("copy %s into %s session %s: %w", src, s.cfg.Executor, s.cfg.ID, err)
	}
	_, err := s.cfg.Client.CopyIn(ctx, dst, func(w io.Writer) error {
		return agent.WriteTar(ctx, w, agent.HostTree{}, src)
	})
	if err != nil {
		return fmt.Errorf("copy %s into %s session %s at %s: %w", src, s.cfg.Executor, s.cfg.ID, dst, err)
	}
	return nil
}

// CopyInNow is CopyIn for a Config.Ready hook, which runs inside the first
// operation (CopyIn would wait for itself).
func (s *Session) CopyInNow(ctx context.Context, src, dst string) error {
	return s.copyIn(ctx, src, dst)
}

// CopyOut copies src, a path relative to the checkout (or absolute), to the
// host path dst, with the same rules as CopyIn.
func (s *Session) CopyOut(ctx context.Context, src, dst string) error {
	done, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("copy %s out of %s session %s: %w", src, s.cfg.Executor, s.cfg.ID, err)
	}
	defer s.end(done)
	dst = filepath.Clean(dst)
	err = s.cfg.Client.CopyOut(ctx, src, func(r io.Reader) error {
		_, err := agent.ExtractTar(ctx, r, agent.HostTree{}, dst)
		return err
	})
	if err != nil {
		return fmt.Errorf("copy %s out of %s session %s to %s: %w", src, s.cfg.Executor, s.cfg.ID, dst, err)
	}
	return nil
}

// Detach closes the connection to the agent and leaves it running with its
// step; a running Exec returns executor.ErrDetached. Idempotent.
func (s *Session) Detach() error {
	s.mu.Lock()
	if s.detached || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.detached = true
	close(s.detaching)
	running := s.execDone
	s.mu.Unlock()
	_ = s.cfg.Client.Close()
	if running != nil {
		<-running
	}
	if s.cfg.Forget != nil {
		s.cfg.Forget()
	}
	return nil
}

// Cleanup kills a running step at once (Exec then returns with Reason
// cancelled), asks the agent to shut down (it kills whatever the step
// left and exits) through Config.Remove, which also removes the
// environment. Only the first call does work; later and concurrent calls
// return nil. It works after Detach too. When ctx ends before the running
// Exec has returned, the environment is removed anyway, and an error says
// the step had not ended yet.
func (s *Session) Cleanup(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	running := s.execDone
	s.mu.Unlock()
	if s.cfg.Forget != nil {
		defer s.cfg.Forget()
	}

	var waitErr error
	if running != nil {
		select {
		case <-running:
		case <-ctx.Done():
			waitErr = fmt.Errorf("clean up %s session %s: the running step had not ended: %w", s.cfg.Executor, s.cfg.ID, ctx.Err())
		}
	}
	// Remove may still use the client (to ask the agent to shut down).
	err := s.cfg.Remove(context.WithoutCancel(ctx))
	_ = s.cfg.Client.Close()
	if err != nil {
		return errors.Join(waitErr, fmt.Errorf("clean up %s session %s: %w", s.cfg.Executor, s.cfg.ID, err))
	}
	return waitErr
}
