package shell

import (
	"context"
	"encoding/json"
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

// ErrClosed is returned by Exec, CopyIn and CopyOut once Cleanup was called.
var ErrClosed = executor.ErrClosed

// session is one run's environment: the checkout, and a session directory
// with the agent that runs the steps.
type session struct {
	exe     *Executor
	id      string
	dir     string // the session directory, 0700
	workdir string // the checkout, as the agent reports it
	client  *agent.Client

	mu        sync.Mutex
	closed    bool
	detached  bool
	closing   chan struct{} // closed by the first Cleanup
	detaching chan struct{} // closed by the first Detach
	execDone  chan struct{} // non-nil while Exec runs; closed when it returns
}

var anonSeq atomic.Int64

// ID returns Spec.ID.
func (s *session) ID() string { return s.id }

// Workdir returns the checkout's absolute host path (symlinks resolved).
func (s *session) Workdir() string { return s.workdir }

// Handle describes the session directory; Recover finds the agent there.
func (s *session) Handle() executor.Handle {
	data, _ := json.Marshal(handleData{Dir: s.dir})
	return executor.Handle{Executor: Name, ID: s.id, Data: data}
}

// begin marks an operation as running. It fails after Cleanup or Detach and
// while another operation runs.
func (s *session) begin() (chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, ErrClosed
	case s.detached:
		return nil, executor.ErrDetached
	case s.execDone != nil:
		return nil, errors.New("another step or copy is running in this session")
	}
	s.execDone = make(chan struct{})
	return s.execDone, nil
}

func (s *session) end(done chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(done)
	s.execDone = nil
}

// Exec starts the step in the session's agent (or attaches to it, when the
// agent started step.ID already) and copies its output to out from
// step.Offset on. The agent writes the script to a private 0700 file and
// starts Step.Shell (default executor.DefaultShell) with its path as the
// last argument, in the checkout, in a new process group, with stdin from
// /dev/null and stdout and stderr on one pipe. The environment is exactly
// Step.Env plus Step.Secrets (a secret wins over a variable of the same
// name), plus PATH (Config.PATH) and HOME (the session's) when absent; the
// secrets travel to the agent over its socket and are never written down.
//
// When the shell exits, the agent kills every process the step left (it is
// their subreaper, and uses a cgroup where it can), whatever their process
// group or session. Step.Timeout (enforced by the agent, also while no
// runner is attached) and the end of ctx stop the step: SIGTERM to all of
// its processes, SIGKILL after Step.Grace (default DefaultGrace); Reason is
// then api.ReasonTimeout (Step.Timeout, or ctx's deadline: the run's
// timeout) or api.ReasonCancelled. Cleanup during Exec kills at once
// (Reason cancelled); Detach returns executor.ErrDetached at once and
// leaves the step running. A dropped connection to the agent is redialed
// and the output resumed at the next byte.
//
// err is non-nil when the step could not be started (bad shell, bad
// variable name, a NUL byte in a value, session cleaned up; ExitCode is then
// -1), when the agent is gone, and when writing to out failed (the step
// still ran to its end). A ctx already ended gives its Reason, ExitCode -1
// and no error.
func (s *session) Exec(ctx context.Context, step executor.Step, out io.Writer) (executor.Result, error) {
	res := executor.Result{ExitCode: -1}
	done, err := s.begin()
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
	req := agent.Start{
		ID: id, Offset: step.Offset, Script: []byte(step.Script), Shell: shell, Env: env,
		TimeoutMS: step.Timeout.Milliseconds(), GraceMS: grace.Milliseconds(),
	}

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
			case <-s.detaching:
				abort()
				return
			case <-watchDone:
				return
			}
		}
	}()

	ex, err := s.client.RunStep(follow, req, out, stop)
	if err != nil {
		if s.isDetached() {
			return res, fmt.Errorf("run step %q: %w", step.Name, executor.ErrDetached)
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
	res = executor.Result{ExitCode: ex.ExitCode, Reason: ex.Reason, Duration: time.Duration(ex.DurationMS) * time.Millisecond, Note: ex.Note}
	return res, nil
}

func (s *session) isDetached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detached
}

// CopyIn copies the host file or directory src to dst, a path relative to
// the checkout (or absolute), through the agent as a tar stream whose
// length and SHA-256 both ends compare. Directories are merged into an
// existing directory; modes (including setuid, setgid, sticky) and
// modification times are kept; symbolic links are copied as links, never
// followed. A relative dst may not leave the checkout, also not through a
// symbolic link. Every regular file's size is verified.
func (s *session) CopyIn(ctx context.Context, src, dst string) error {
	done, err := s.begin()
	if err != nil {
		return fmt.Errorf("copy %s into shell session %s: %w", src, s.id, err)
	}
	defer s.end(done)
	src = filepath.Clean(src)
	if _, err := os.Lstat(src); err != nil {
		return fmt.Errorf("copy %s into shell session %s: %w", src, s.id, err)
	}
	_, err = s.client.CopyIn(ctx, dst, func(w io.Writer) error {
		return agent.WriteTar(ctx, w, agent.HostTree{}, src)
	})
	if err != nil {
		return fmt.Errorf("copy %s into shell session %s at %s: %w", src, s.id, dst, err)
	}
	return nil
}

// CopyOut copies src, a path relative to the checkout (or absolute), to the
// host path dst, with the same rules as CopyIn.
func (s *session) CopyOut(ctx context.Context, src, dst string) error {
	done, err := s.begin()
	if err != nil {
		return fmt.Errorf("copy %s out of shell session %s: %w", src, s.id, err)
	}
	defer s.end(done)
	dst = filepath.Clean(dst)
	err = s.client.CopyOut(ctx, src, func(r io.Reader) error {
		_, err := agent.ExtractTar(ctx, r, agent.HostTree{}, dst)
		return err
	})
	if err != nil {
		return fmt.Errorf("copy %s out of shell session %s to %s: %w", src, s.id, dst, err)
	}
	return nil
}

// Detach closes the connection to the agent and leaves it running with its
// step; a running Exec returns executor.ErrDetached. Idempotent.
func (s *session) Detach() error {
	s.mu.Lock()
	if s.detached || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.detached = true
	close(s.detaching)
	running := s.execDone
	s.mu.Unlock()
	_ = s.client.Close()
	if running != nil {
		<-running
	}
	s.exe.forget(s)
	return nil
}

// Cleanup kills a running step at once (Exec then returns with Reason
// cancelled), asks the agent to shut down (it kills whatever the step left
// and exits), and removes the session directory with the steps' HOME. The
// checkout itself belongs to the runner and stays. Only the first call does
// work; later and concurrent calls return nil. It works after Detach too.
// When ctx ends before the running Exec has returned, the agent is killed
// and the directory removed anyway, and an error says the step had not
// ended yet.
func (s *session) Cleanup(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	running := s.execDone
	s.mu.Unlock()
	defer s.exe.forget(s)

	var waitErr error
	if running != nil {
		select {
		case <-running:
		case <-ctx.Done():
			waitErr = fmt.Errorf("clean up shell session %s: the running step had not ended: %w", s.id, ctx.Err())
		}
	}
	_ = s.client.Close()
	if err := s.exe.removeSession(context.WithoutCancel(ctx), s.dir); err != nil {
		return errors.Join(waitErr, fmt.Errorf("clean up shell session %s: %w", s.id, err))
	}
	return waitErr
}
