package agentenv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// local is a fourth executor in a few dozen lines, to show that the layer
// leaves an executor only what is its own: its environment is a
// knotless-agent process in a directory of this host. Its fault switch
// plays the environment's own account of why it stopped (an eviction, a
// stopped container), which Why reports once set.
type local struct {
	*agentenv.Base
	dir, bin string
	fault    atomic.Pointer[executor.Fault]
	// compress is its Env.Compress; sent and received count the
	// bytes its connections to the agent carried.
	compress       bool
	sent, received atomic.Int64
}

func newLocal(dir, bin string) *local {
	l := &local{dir: dir, bin: bin}
	l.Base = agentenv.NewBase("local", (*localDriver)(l), agentenv.Config{Agent: bin}.Defaults(), nil)
	return l
}

type localDriver local

func (d *localDriver) Make(ctx context.Context, spec executor.Spec, serve agent.Serve) (*agentenv.Env, error) {
	dir := filepath.Join(d.dir, spec.ID)
	if err := os.MkdirAll(filepath.Join(dir, "home"), 0o700); err != nil {
		return nil, err
	}
	serve.Dir, serve.Socket, serve.Workdir, serve.Home = dir, filepath.Join(dir, "agent.sock"), spec.Workspace, filepath.Join(dir, "home")
	cmd := exec.Command(d.bin, serve.Args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	go func() { _ = cmd.Wait() }()
	return d.env(dir), nil
}

func (d *localDriver) Open(_ context.Context, id string, _ json.RawMessage) (*agentenv.Env, error) {
	dir := filepath.Join(d.dir, id)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%v: %w", err, executor.ErrNotRecoverable)
	}
	return d.env(dir), nil
}

func (d *localDriver) List(context.Context) ([]agentenv.Listed, error) {
	entries, _ := os.ReadDir(d.dir)
	var out []agentenv.Listed
	for _, e := range entries {
		env := d.env(filepath.Join(d.dir, e.Name()))
		out = append(out, agentenv.Listed{ID: e.Name(), Name: env.Name, Remove: func(ctx context.Context) error { return env.Remove(ctx, false) }})
	}
	return out, nil
}

func (d *localDriver) env(dir string) *agentenv.Env {
	return &agentenv.Env{Environment: localEnv{d: d, dir: dir}, Name: "directory " + dir, Data: dir, Compress: d.compress}
}

// localEnv is the local agent in dir as an agentenv.Environment.
type localEnv struct {
	d   *localDriver
	dir string
}

func (l localEnv) Dial(ctx context.Context) (io.ReadWriteCloser, error) {
	c, err := agent.DialUnix(ctx, filepath.Join(l.dir, "agent.sock"))
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%w: %v", agent.ErrGone, err)
	}
	if err != nil {
		return nil, err
	}
	return &counted{ReadWriteCloser: c, l: (*local)(l.d)}, nil
}

func (l localEnv) Why(context.Context) *executor.Fault { return l.d.fault.Load() }

func (l localEnv) Remove(ctx context.Context, agentEnded bool) error {
	if pid := agentPID(l.dir); pid > 1 && !agentEnded {
		_ = syscall.Kill(pid, syscall.SIGTERM) // it ends its steps and exits
		for i := 0; i < 1000 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return os.RemoveAll(l.dir)
}

// agentPID is the PID the agent in dir recorded; 0 when none.
func agentPID(dir string) int {
	var st struct{ PID int }
	b, _ := os.ReadFile(filepath.Join(dir, "agent.json"))
	_ = json.Unmarshal(b, &st)
	return st.PID
}

// counted counts what a connection carried into its local's sent and
// received.
type counted struct {
	io.ReadWriteCloser
	l *local
}

func (c *counted) Write(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Write(p)
	c.l.sent.Add(int64(n))
	return n, err
}

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(p)
	c.l.received.Add(int64(n))
	return n, err
}
