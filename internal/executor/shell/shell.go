package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/stepagent"
)

// Name is the shell executor's name as the --executor flag spells it.
const Name = "shell"

// fallbackPATH is the steps' PATH when neither Config.PATH nor the runner's
// own PATH says anything.
const fallbackPATH = "/usr/local/bin:/usr/bin:/bin"

// agentReadyWait bounds the wait for a new agent to listen.
const agentReadyWait = 10 * time.Second

// Config configures the shell executor. Of the shared agentenv.Config it
// uses Agent, Heartbeat, DeadAfter, Logger and Ephemeral (each agent then
// ends its steps and exits when the process that started it is gone); it
// runs no image, so Job is ignored.
type Config struct {
	agentenv.Config
	// Dir is where sessions live: one directory Dir/<Spec.ID>, mode 0700,
	// per run, holding the agent's socket, log and state and the steps'
	// HOME. Typically <runner work dir>/shell. Created (0700) when missing.
	// Required.
	Dir string
	// PATH is the PATH a step gets when Step.Env has no PATH. Empty means the
	// runner's own PATH as it was when New was called.
	PATH string
	// AgentArgs are extra arguments for `knotless-agent serve`, e.g.
	// "--no-cgroups".
	AgentArgs []string
	// Dial opens a connection to an agent's socket; nil means a plain Unix
	// socket connection. Tests put a proxy here that cuts connections.
	Dial func(ctx context.Context, socket string) (io.ReadWriteCloser, error)
	// User, when set, is the unprivileged user every step runs as (the
	// runner runs as root; knotless-run --user): the agent drops to it for
	// each step's processes, HOME and the workspace become its own.
	User *stepagent.StepUser
}

// Executor runs steps as processes on the runner's host, each run under its
// own step agent (a knotless-agent process detached from the runner), so
// that steps go on while the runner restarts. Its methods may be called
// concurrently for different runs.
type Executor struct {
	*agentenv.Base
	cfg Config
	log *slog.Logger
}

var (
	_ executor.Executor = (*Executor)(nil)
)

// New returns a shell executor configured by cfg. It does not touch the file
// system; Prepare creates cfg.Dir when needed and finds the agent.
func New(cfg Config) *Executor {
	if cfg.PATH == "" {
		cfg.PATH = os.Getenv("PATH")
	}
	if cfg.PATH == "" {
		cfg.PATH = fallbackPATH
	}
	cfg.Config = cfg.Config.Defaults()
	e := &Executor{cfg: cfg, log: cfg.Logger.With("executor", Name)}
	e.Base = agentenv.NewBase(Name, (*driver)(e), cfg.Config, nil)
	return e
}

// driver is the shell executor's agentenv.Driver: an environment is a
// session directory with an agent process in it.
type driver Executor

// handleData is the shell executor's Handle.Data.
type handleData struct {
	Dir string `json:"dir"` // the session directory
}

// Make checks that spec.Workspace is a directory, creates the session's
// directory Config.Dir/<spec.ID> (mode 0700; a stale one of an earlier
// process is replaced after its agent is stopped) with the steps' HOME
// and TMPDIR in it, and starts the session's agent there (detached from
// the runner, in its own session and process group). The setup log says
// that steps run directly on this host, how a step's processes are ended,
// and which parts of spec it ignores (Image, resource limits). It only
// hands the workspace's path to the agent, which reads nothing in it
// before a step starts (executor.Executor.Prepare).
//
// Errors: no Config.Dir, a missing workspace, no agent program, an agent
// that does not start within 10 s, or a file-system failure; on error
// the agent is stopped and the directory removed.
func (d *driver) Make(ctx context.Context, spec executor.Spec, serve agent.Serve) (*agentenv.Env, error) {
	e := (*Executor)(d)
	if e.cfg.Dir == "" {
		return nil, errors.New("the shell executor has no directory for its files (Config.Dir is empty)")
	}
	if err := agentenv.NoServices(spec, Name); err != nil {
		return nil, err
	}
	if err := agentenv.CheckHostArch(spec); err != nil {
		return nil, err
	}
	if spec.ContainerBuilds && spec.Log != nil {
		fmt.Fprintln(spec.Log, "shell executor: container-builds: true adds nothing here: the steps run on this host and build with its own tools (docker, podman, buildah), as any step could")
	}
	workdir, err := checkDir(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	bin, err := agentenv.ResolveAgent(e.cfg.Agent)
	if err != nil {
		return nil, err
	}
	base, err := filepath.Abs(e.cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("create executor directory: %w", err)
	}
	dir := filepath.Join(base, spec.ID)
	if _, err := os.Lstat(dir); err == nil {
		e.removeSession(ctx, dir)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create session directory: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			e.removeSession(context.WithoutCancel(ctx), dir)
		}
	}()
	// Mkdir's mode is filtered by the umask; 0700 is what we promise.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, fmt.Errorf("create HOME: %w", err)
	}
	// The steps' TMPDIR, removed with the session (as a pod's /tmp is).
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("create TMPDIR: %w", err)
	}
	serve.Dir, serve.Socket = dir, filepath.Join(dir, "agent.sock")
	serve.Workdir, serve.Home, serve.Tmp, serve.PATH = workdir, home, filepath.Join(dir, "tmp"), e.cfg.PATH
	// An agent of `knotless-run exec` ends with its parent, this process.
	serve.ExitWithParent, serve.ExitWithoutClient = e.cfg.Ephemeral, 0
	if e.cfg.User != nil {
		serve.User = e.cfg.User.String()
	}
	if err := e.startAgent(ctx, bin, dir, serve); err != nil {
		return nil, err
	}
	env := e.env(dir)
	env.AddHooks(agentenv.Hooks{Attached: func(_ context.Context, _ *agent.Client, hello agent.AgentHello) error {
		if err := writeSetupLog(spec, hello.Kill, e.cfg.Ephemeral, e.cfg.User); err != nil {
			return fmt.Errorf("write setup log: %w", err)
		}
		return nil
	}})
	ok = true
	return env, nil
}

// Open finds the session directory of id for Recover; the handle must
// name Config.Dir/<id>.
func (d *driver) Open(_ context.Context, id string, data json.RawMessage) (*agentenv.Env, error) {
	e := (*Executor)(d)
	base, err := filepath.Abs(e.cfg.Dir)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, id)
	if len(data) > 0 {
		var h handleData
		if err := json.Unmarshal(data, &h); err != nil {
			return nil, fmt.Errorf("unreadable handle: %v: %w", err, executor.ErrNotRecoverable)
		}
		if filepath.Clean(h.Dir) != dir {
			return nil, fmt.Errorf("the handle names %s, not %s: %w", h.Dir, dir, executor.ErrNotRecoverable)
		}
	}
	return e.env(dir), nil
}

// List returns the session directories under Config.Dir; a missing
// Config.Dir holds none.
func (d *driver) List(context.Context) ([]agentenv.Listed, error) {
	e := (*Executor)(d)
	if e.cfg.Dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(e.cfg.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []agentenv.Listed
	for _, ent := range entries {
		dir := filepath.Join(e.cfg.Dir, ent.Name())
		out = append(out, agentenv.Listed{ID: ent.Name(), Name: "session " + dir,
			Remove: func(ctx context.Context) error { return e.removeSession(ctx, dir) }})
	}
	return out, nil
}

// env is the session directory dir as an environment: its agent is
// reached at dir/agent.sock; the host sees the steps' checkout and HOME,
// so caches move on the runner's disk (given to Config.User, if any), and
// with a User the checkout and HOME become the user's before the first
// step.
func (e *Executor) env(dir string) *agentenv.Env {
	home := filepath.Join(dir, "home")
	env := &agentenv.Env{Environment: sessionDir{e: e, dir: dir}, Name: "session directory " + dir, Data: handleData{Dir: dir}}
	var workdir string // the checkout as the agent says
	env.AddHooks(agentenv.Hooks{
		Attached: func(_ context.Context, _ *agent.Client, hello agent.AgentHello) error {
			workdir = hello.Workdir
			return nil
		},
		Ready: func(ctx context.Context, s *agentenv.Session) error {
			if u := e.cfg.User; u != nil {
				base := filepath.Clean(e.cfg.Dir)
				if err := openForUser(u, base, dir); err != nil {
					return err
				}
				return giveWorkspace(ctx, u, s.Workdir(), filepath.Dir(base))
			}
			return nil
		},
	})
	// Steps see the host's own paths: caches move on the runner's disk,
	// never through the agent, for the checkout and HOME only.
	env.HostPath = func(p string) (string, string, bool) {
		p = filepath.Clean(p)
		for _, root := range []string{workdir, home} {
			if root != "" && (p == root || strings.HasPrefix(p, root+"/")) {
				return p, root, true
			}
		}
		return "", "", false
	}
	if u := e.cfg.User; u != nil {
		env.HostChown = func(p string) error {
			root := workdir
			if p == home || strings.HasPrefix(p, home+"/") {
				root = home
			}
			return cache.GiveTree(root, p, int(u.UID), int(u.GID))
		}
	}
	return env
}

// sessionDir is session directory dir as an agentenv.Environment: its
// agent is reached at dir/agent.sock (dialer); Why is agentGone; Remove
// waits for an agent asked to end (5 s at most) and removes the
// directory with every process of the session (removeSession).
type sessionDir struct {
	e   *Executor
	dir string
}

func (d sessionDir) Dial(ctx context.Context) (io.ReadWriteCloser, error) {
	return d.e.dialer(d.dir)(ctx)
}

func (d sessionDir) Why(context.Context) *executor.Fault { return agentGone(d.dir) }

func (d sessionDir) Remove(ctx context.Context, agentEnded bool) error {
	if agentEnded {
		d.e.waitAgentGone(d.dir, 5*time.Second)
	}
	return d.e.removeSession(ctx, d.dir)
}

// agentGone is why a session directory's environment stopped: nil while
// its agent runs.
func agentGone(dir string) *executor.Fault {
	if _, ok := recordedProcess(filepath.Join(dir, "agent.json")); ok {
		return nil
	}
	return &executor.Fault{Reason: api.ReasonExecutor, Message: "the step agent of this run is gone: it was stopped or killed from outside the runner"}
}

// dialer returns the agent client's dialer for a session directory. A
// socket that is missing or refuses connections means the agent is gone.
func (e *Executor) dialer(dir string) agent.Dialer {
	socket := filepath.Join(dir, "agent.sock")
	return func(ctx context.Context) (io.ReadWriteCloser, error) {
		if e.cfg.Dial != nil {
			return e.cfg.Dial(ctx, socket)
		}
		c, err := agent.DialUnix(ctx, socket)
		if err != nil && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return nil, fmt.Errorf("%w: nothing listens on %s: %v", agent.ErrGone, socket, err)
		}
		return c, err
	}
}

// writeSetupLog tells the run's setup log what this executor is and what of
// spec it ignores.
func writeSetupLog(spec executor.Spec, kill string, ephemeral bool, su *stepagent.StepUser) error {
	w := spec.Log
	if w == nil {
		return nil
	}
	user := "the runner's user"
	if u := os.Getenv("USER"); u != "" {
		user = u
	}
	as, hint := fmt.Sprintf("%s (uid %d)", user, os.Getuid()), ""
	if su != nil {
		as = fmt.Sprintf("user %s (uid %d, gid %d; --user), not as the runner's uid %d", su.Name, su.UID, su.GID, os.Getuid())
	} else if os.Getuid() == 0 {
		hint = " (knotless-run --user NAME runs them as an unprivileged user)"
	}
	if _, err := fmt.Fprintf(w, "shell executor: steps run directly on this host as %s, without isolation; use it for trusted repositories only%s\n", as, hint); err != nil {
		return err
	}
	lives := "so they go on while the runner restarts"
	if ephemeral {
		lives = "which ends them if this process is killed"
	}
	if _, err := fmt.Fprintf(w, "shell executor: a step agent runs the steps, %s; a step's processes end with the step (%s)\n", lives, kill); err != nil {
		return err
	}
	if spec.Image != "" {
		if _, err := fmt.Fprintf(w, "shell executor ignores image %s\n", spec.Image); err != nil {
			return err
		}
	}
	if spec.CPUs != "" || spec.MemoryBytes != 0 || spec.DiskBytes != 0 {
		if _, err := fmt.Fprintf(w, "shell executor ignores resource limits (cpus %q, memory %d bytes, disk %d bytes)\n",
			spec.CPUs, spec.MemoryBytes, spec.DiskBytes); err != nil {
			return err
		}
	}
	return nil
}

// checkDir returns path made absolute (symlinks resolved) if it names a
// directory.
func checkDir(path string) (string, error) {
	if path == "" {
		return "", errors.New("no directory given")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", abs)
	}
	return abs, nil
}
