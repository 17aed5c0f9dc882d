package agentenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// sessionConfig describes one session (Base.attach).
type sessionConfig struct {
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
	// Env is the environment: its Environment (Why, Remove), its Hooks
	// (Ready, AroundStep), HostPath and HostChown.
	Env *Env
	// Forget tells Base that the session is over (Cleanup, Detach).
	Forget func()
}

// Session is an executor.Session over a step agent.
type Session struct {
	cfg sessionConfig

	mu        sync.Mutex
	closed    bool
	detached  bool
	closing   chan struct{} // closed by the first Cleanup
	detaching chan struct{} // closed by the first Detach
	execDone  chan struct{} // non-nil while an operation runs; closed when it returns

	readyOnce sync.Once
	readyErr  error

	// checkServices says the run has services (Spec.Services): each step's
	// end asks the environment whether one stopped.
	checkServices bool
}

var _ executor.Session = (*Session)(nil)

// newSession returns the session cfg describes. It does not connect.
func newSession(cfg sessionConfig) *Session {
	return &Session{cfg: cfg, closing: make(chan struct{}), detaching: make(chan struct{})}
}

var anonSeq atomic.Int64

// ID returns Spec.ID.
func (s *Session) ID() string { return s.cfg.ID }

// Workdir returns the checkout's path as the steps see it.
func (s *Session) Workdir() string { return s.cfg.Workdir }

// Handle returns the environment's handle for Recover.
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
	if s.cfg.Env.Hooks.Ready != nil {
		s.readyOnce.Do(func() { s.readyErr = s.cfg.Env.Hooks.Ready(ctx, s) })
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
// Env.Why says why the environment stopped, the step's Result carries
// that reason (no exit code, 137 for oom-killed) and its words as Note.
// A step the agent stopped as cancelled although neither ctx nor Cleanup
// asked (its PID 1 was signalled from outside) is never cancelled: it
// takes Env.Why's reason, asked for up to 10 s, else Env.LostReason.
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
	if s.cfg.Env.Compress {
		// Asked for, not negotiated: an agent sends Output frames
		// whatever it is asked, and OutputZstd ones only if it knows them.
		req.Compression = agent.CompressionZstd
	}
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
				// Cleanup removes the environment: nothing to follow.
				go func() {
					select {
					case <-time.After(5 * time.Second):
						abort()
					case <-watchDone:
					}
				}()
			case <-s.detaching:
				abort()
				return
			case <-watchDone:
				return
			}
		}
	}()

	var after func(*executor.Result)
	if s.cfg.Env.Hooks.AroundStep != nil {
		after = s.cfg.Env.Hooks.AroundStep()
	}
	res, err = s.runStep(ctx, follow, step, req, out, stop)
	if err == nil && after != nil {
		after(&res)
	}
	if err == nil && res.Reason == "" && s.checkServices {
		// A service that stopped while the step ran (or before it) fails
		// the step that could not use it, naming it.
		if f := s.cfg.Env.Why(context.WithoutCancel(ctx)); f != nil && f.Reason == api.ReasonService {
			res.Reason = api.ReasonService
			res.Note = strings.TrimPrefix(res.Note+"; "+f.Message+" (by the end of this step)", "; ")
		}
	}
	return res, err
}

// runStep runs req through the agent client and makes the step's Result:
// the agent's, or the environment's when it let the step down.
func (s *Session) runStep(ctx, follow context.Context, step executor.Step, req agent.Start, out io.Writer, stop <-chan agent.Stop) (executor.Result, error) {
	res := executor.Result{ExitCode: -1}
	ex, err := s.cfg.Client.RunStep(follow, req, out, stop)
	if err != nil {
		if s.isDetached() {
			return res, fmt.Errorf("run step %q: %w", step.Name, executor.ErrDetached)
		}
		if s.isClosed() {
			return executor.Result{ExitCode: -1, Reason: api.ReasonCancelled}, nil
		}
		// The agent cannot be reached: the environment may say why (the
		// pod was evicted, the container stopped). An environment that
		// still runs has no fault to wait for: 2 s bound the asking.
		if f := s.why(2 * time.Second); f != nil {
			return faultResult(f), nil
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
	if res.Reason == api.ReasonCancelled && ctx.Err() == nil && !s.isClosed() {
		// Nobody cancelled it: the agent stopped the step because its own
		// PID 1 was signalled (the pod deleted or evicted, the container
		// stopped from outside). Never cancelled, which reads as a
		// person's doing: the environment's reason, once it tells (the
		// kubelet reports an eviction after it signalled the container).
		res.ExitCode = -1
		if f := s.why(10 * time.Second); f != nil {
			r := faultResult(f)
			r.Duration = res.Duration
			return r, nil
		}
		res.Reason, res.Note = s.cfg.Env.lostReason(), stoppedNote
	}
	return res, nil
}

// why asks the environment why it stopped, for up to bound while it
// does not say; nil when it never does.
func (s *Session) why(bound time.Duration) *executor.Fault { return whyWithin(s.cfg.Env, bound) }

// faultResult is the Result of a step its environment let down: no exit
// code of its own, except 137 for a step killed for its memory (a
// shell's report of SIGKILL).
func faultResult(f *executor.Fault) executor.Result {
	code := -1
	if f.Reason == api.ReasonOOMKilled {
		code = 137
	}
	return executor.Result{ExitCode: code, Reason: f.Reason, Note: f.Message}
}

// shutdownBound bounds asking the agent to end its steps and exit.
const shutdownBound = 10 * time.Second

// remove asks the agent over the session's stream to kill every step
// process and exit (it answers once none is left), then removes the
// environment (Env.Remove), told whether the agent answered.
func (s *Session) remove(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, shutdownBound)
	err := s.cfg.Client.Shutdown(sctx)
	cancel()
	if err != nil {
		slog.Debug("the agent could not be asked to shut down; removing its environment", "environment", s.cfg.Env.Name, "err", err)
	}
	return s.cfg.Env.Remove(ctx, err == nil)
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

// copyIn is CopyIn without the bookkeeping (the Ready hook uses it).
func (s *Session) copyIn(ctx context.Context, src, dst string) error {
	src = filepath.Clean(src)
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("copy %s into %s session %s: %w", src, s.cfg.Executor, s.cfg.ID, err)
	}
	req := agent.CopyIn{Dst: dst, Compression: s.streamCompression(ctx)}
	_, err := s.cfg.Client.CopyInWith(ctx, req, func(w io.Writer) error {
		return agent.WriteTar(ctx, w, agent.HostTree{}, src)
	})
	if err != nil {
		return fmt.Errorf("copy %s into %s session %s at %s: %w", src, s.cfg.Executor, s.cfg.ID, dst, err)
	}
	return nil
}

// CopyInNow is CopyIn for a Ready hook (Hooks.Ready), which runs inside the first
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
	req := agent.CopyOut{Src: src, Compression: s.streamCompression(ctx)}
	err = s.cfg.Client.CopyOutWith(ctx, req, func(r io.Reader) error {
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
// left and exits) and then removes the environment (Env.Remove). Only the first call does work; later and concurrent calls
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
	err := s.remove(context.WithoutCancel(ctx))
	_ = s.cfg.Client.Close()
	if err != nil {
		return errors.Join(waitErr, fmt.Errorf("clean up %s session %s: %w", s.cfg.Executor, s.cfg.ID, err))
	}
	return waitErr
}
