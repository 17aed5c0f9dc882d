package shell

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentsession"
	"knotless.dev/knotless/internal/stepagent"
	"knotless.dev/knotless/internal/version"
)

// Name is the shell executor's name as the --executor flag spells it.
const Name = "shell"

// AgentName is the step agent's program name, looked up beside the running
// program and in PATH when Config.Agent is empty.
const AgentName = "knotless-agent"

// fallbackPATH is the steps' PATH when neither Config.PATH nor the runner's
// own PATH says anything.
const fallbackPATH = "/usr/local/bin:/usr/bin:/bin"

// agentReadyWait bounds the wait for a new agent to listen.
const agentReadyWait = 10 * time.Second

// Config configures the shell executor.
type Config struct {
	// Dir is where sessions live: one directory Dir/<Spec.ID>, mode 0700,
	// per run, holding the agent's socket, log and state and the steps'
	// HOME. Typically <runner work dir>/shell. Created (0700) when missing.
	// Required.
	Dir string
	// Agent is the knotless-agent program; empty means FindAgent.
	Agent string
	// PATH is the PATH a step gets when Step.Env has no PATH. Empty means the
	// runner's own PATH as it was when New was called.
	PATH string
	// Ephemeral makes each agent end its steps and exit when the process
	// that started it is gone (`knotless-run exec`: nobody takes over).
	Ephemeral bool
	// AgentArgs are extra arguments for `knotless-agent serve`, e.g.
	// "--no-cgroups".
	AgentArgs []string
	// Heartbeat and DeadAfter tune the agent connection (tests); zero means
	// agent.DefaultHeartbeat and agent.DefaultDeadAfter.
	Heartbeat time.Duration
	DeadAfter time.Duration
	// Dial opens a connection to an agent's socket; nil means a plain Unix
	// socket connection. Tests put a proxy here that cuts connections.
	Dial func(ctx context.Context, socket string) (io.ReadWriteCloser, error)
	// User, when set, is the unprivileged user every step runs as (the
	// runner runs as root; knotless-run --user): the agent drops to it for
	// each step's processes, HOME and the workspace become its own.
	User *stepagent.StepUser
	// Logger receives one line per event an operator cares about (an agent
	// connection lost and regained, processes that would not die). Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Executor runs steps as processes on the runner's host, each run under its
// own step agent (a knotless-agent process detached from the runner), so
// that steps go on while the runner restarts. Its methods may be called
// concurrently for different runs.
type Executor struct {
	cfg Config
	log *slog.Logger

	live agentsession.Live // by Spec.ID, until Cleanup or Detach
}

var _ executor.Executor = (*Executor)(nil)

// New returns a shell executor configured by cfg. It does not touch the file
// system; Prepare creates cfg.Dir when needed and finds the agent.
func New(cfg Config) *Executor {
	if cfg.PATH == "" {
		cfg.PATH = os.Getenv("PATH")
	}
	if cfg.PATH == "" {
		cfg.PATH = fallbackPATH
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Executor{cfg: cfg, log: log.With("executor", Name)}
}

// Name returns "shell".
func (e *Executor) Name() string { return Name }

// PrepareEarly reports true: Prepare only hands the workspace's path to
// the agent, which reads nothing in it before a step starts.
func (e *Executor) PrepareEarly() bool { return true }

var _ executor.EarlyPreparer = (*Executor)(nil)

// FindAgent returns the knotless-agent program: the one beside the running
// program, else the one in PATH. The error says where it looked.
func FindAgent() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), AgentName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(AgentName); err == nil {
		return filepath.Abs(p)
	}
	dir := "the running program's directory"
	if self, err := os.Executable(); err == nil {
		dir = filepath.Dir(self)
	}
	return "", fmt.Errorf("the step agent %s is neither in %s nor in PATH: install it beside knotless-run, or give its path with --agent", AgentName, dir)
}

func (e *Executor) agentPath() (string, error) {
	if e.cfg.Agent != "" {
		p, err := filepath.Abs(e.cfg.Agent)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("the step agent: %w", err)
		}
		return p, nil
	}
	return FindAgent()
}

// validID is what a Spec.ID must look like: it names a directory under
// Config.Dir, so it is one plain path element.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// handleData is the shell executor's Handle.Data.
type handleData struct {
	Dir string `json:"dir"` // the session directory
}

// Prepare checks that spec.Workspace is a directory, creates the session's
// directory Config.Dir/<spec.ID> (mode 0700; a stale one of an earlier
// process is replaced after its agent is stopped) with the steps' HOME in
// it, starts the session's agent there (detached from the runner, in its
// own session and process group) and connects to it. It writes to spec.Log
// that steps run directly on this host, how a step's processes are ended,
// and which parts of spec it ignores (Image, resource limits).
//
// Errors: an invalid ID, an ID that has a live session in this executor, a
// missing workspace, no agent program, an agent that does not start within
// 10 s, or a file-system failure; on error nothing is left behind (the
// agent is stopped, the directory removed).
func (e *Executor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("prepare shell session %q: %w", spec.ID, err)
	}
	if !validID.MatchString(spec.ID) {
		return nil, fmt.Errorf("prepare shell session %q: the run ID must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", spec.ID)
	}
	if e.cfg.Dir == "" {
		return nil, fmt.Errorf("prepare shell session %s: the shell executor has no directory for its files (Config.Dir is empty)", spec.ID)
	}
	workdir, err := checkDir(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("prepare shell session %s: workspace: %w", spec.ID, err)
	}
	bin, err := e.agentPath()
	if err != nil {
		return nil, fmt.Errorf("prepare shell session %s: %w", spec.ID, err)
	}
	base, err := filepath.Abs(e.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("prepare shell session %s: %w", spec.ID, err)
	}

	// Hold the ID while preparing, so a concurrent Prepare of it fails.
	if !e.live.Reserve(spec.ID) {
		return nil, fmt.Errorf("prepare shell session %s: a session with this ID is still live (call Cleanup first)", spec.ID)
	}
	s, err := e.prepare(ctx, spec, base, workdir, bin)
	e.live.Done(spec.ID, s)
	if err != nil {
		return nil, fmt.Errorf("prepare shell session %s: %w", spec.ID, err)
	}
	return s, nil
}

func (e *Executor) prepare(ctx context.Context, spec executor.Spec, base, workdir, bin string) (*agentsession.Session, error) {
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
	var deadline time.Time
	if spec.Timeout > 0 {
		deadline = time.Now().Add(spec.Timeout)
	}
	if err := e.startAgent(ctx, bin, dir, workdir, home, spec.ID, deadline); err != nil {
		return nil, err
	}
	client := e.newClient(spec.ID, dir)
	hello, err := client.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to the step agent: %w", err)
	}
	s := e.newSession(spec.ID, dir, hello.Workdir, client, e.userReady(dir, spec.Workspace))
	if err := writeSetupLog(spec, hello.Kill, e.cfg.Ephemeral, e.cfg.User); err != nil {
		_ = client.Shutdown(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("write setup log: %w", err)
	}
	ok = true
	return s, nil
}

// startAgent starts `knotless-agent serve` for a session directory and
// waits until it listens. The agent gets a minimal environment (PATH only:
// nothing of the runner's), its own session (setsid: no signal to the
// runner's process group or terminal reaches it), and no death signal, so
// it outlives the runner.
func (e *Executor) startAgent(ctx context.Context, bin, dir, workdir, home, id string, deadline time.Time) error {
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("agent log: %w", err)
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	args := []string{"serve", "--dir", dir, "--socket", filepath.Join(dir, "agent.sock"),
		"--workdir", workdir, "--home", home, "--tmp", filepath.Join(dir, "tmp"), "--path", e.cfg.PATH, "--run", id, "--ready-fd", "3"}
	if !deadline.IsZero() {
		args = append(args, "--deadline", deadline.UTC().Format(time.RFC3339Nano))
	}
	if e.cfg.Heartbeat > 0 {
		args = append(args, "--heartbeat", e.cfg.Heartbeat.String())
	}
	if e.cfg.DeadAfter > 0 {
		args = append(args, "--dead-after", e.cfg.DeadAfter.String())
	}
	if e.cfg.Ephemeral {
		args = append(args, "--exit-with-parent")
	}
	if e.cfg.User != nil {
		args = append(args, "--user", e.cfg.User.String())
	}
	args = append(args, e.cfg.AgentArgs...)
	cmd := &exec.Cmd{
		Path:        bin,
		Args:        append([]string{AgentName}, args...),
		Env:         []string{"PATH=" + fallbackPATH},
		Dir:         dir,
		Stdout:      logf,
		Stderr:      logf,
		ExtraFiles:  []*os.File{readyW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start the step agent %s: %w", bin, err)
	}
	// Reap it whenever it exits while this process lives.
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(readyR).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
	}()
	fail := func(err error) error {
		_ = cmd.Process.Kill()
		<-exited
		tail, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
		if s := strings.TrimSpace(lastLines(string(tail), 3)); s != "" {
			return fmt.Errorf("%w; its log ends: %s", err, s)
		}
		return err
	}
	select {
	case err := <-ready:
		if err != nil {
			return fail(fmt.Errorf("the step agent did not start: %v", err))
		}
		return nil
	case <-time.After(agentReadyWait):
		return fail(fmt.Errorf("the step agent did not listen within %s", agentReadyWait))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
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

func (e *Executor) newClient(id, dir string) *agent.Client {
	opts := agent.Options{
		Name:      "knotless-run " + version.Version,
		Heartbeat: e.cfg.Heartbeat,
		DeadAfter: e.cfg.DeadAfter,
		Logger:    e.log.With("run", id),
		OnHello: func(h agent.AgentHello) error {
			if h.Run != id {
				return fmt.Errorf("the agent in %s serves run %q, not %q", dir, h.Run, id)
			}
			return nil
		},
	}
	return agent.NewClient(e.dialer(dir), opts)
}

// newSession is the session of the agent in dir that client reaches.
// ready, when set, runs before the session's first operation.
func (e *Executor) newSession(id, dir, workdir string, client *agent.Client, ready func(context.Context) error) *agentsession.Session {
	data, _ := json.Marshal(handleData{Dir: dir})
	var s *agentsession.Session
	s = agentsession.New(agentsession.Config{
		Executor: Name, ID: id, Workdir: workdir, Client: client, Ready: ready,
		Handle: executor.Handle{Executor: Name, ID: id, Data: data},
		Remove: func(ctx context.Context) error { return e.removeSession(ctx, dir) },
		Forget: func() { e.live.Forget(id, s) },
		// Steps see the host's own paths: caches move on the runner's
		// disk, never through the agent, for the checkout and HOME only.
		HostPath: func(p string) (string, string, bool) {
			p = filepath.Clean(p)
			for _, root := range []string{workdir, filepath.Join(dir, "home")} {
				if p == root || strings.HasPrefix(p, root+"/") {
					return p, root, true
				}
			}
			return "", "", false
		},
		// With --user, what a restore made is the step user's.
		HostChown: e.giveRestored(workdir, filepath.Join(dir, "home")),
	})
	return s
}

// giveRestored makes a restored cache path (below the workspace or HOME)
// Config.User's; nil without a User.
func (e *Executor) giveRestored(workdir, home string) func(string) error {
	u := e.cfg.User
	if u == nil {
		return nil
	}
	return func(p string) error {
		root := workdir
		if p == home || strings.HasPrefix(p, home+"/") {
			root = home
		}
		return cache.GiveTree(root, p, int(u.UID), int(u.GID))
	}
}

// userReady hands the session directory dir's HOME (and TMPDIR) and the
// workspace ws to Config.User before the first step, once the checkout
// is complete; nil without a User. Idempotent (a recovered session runs
// it again).
func (e *Executor) userReady(dir, ws string) func(context.Context) error {
	u := e.cfg.User
	if u == nil {
		return nil
	}
	base := filepath.Clean(e.cfg.Dir)
	work := filepath.Dir(base) // the runner's --work
	return func(ctx context.Context) error {
		if err := openForUser(u, base, dir); err != nil {
			return err
		}
		return giveWorkspace(ctx, u, ws, work)
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

// Recover re-attaches to the session h describes when its agent still
// runs: it connects to the agent's socket in the session directory and
// checks that the agent serves h.ID. Errors wrap executor.ErrNotRecoverable
// when the handle is not this executor's, names a directory outside
// Config.Dir, or no agent answers there.
func (e *Executor) Recover(ctx context.Context, h executor.Handle) (executor.Session, error) {
	notRecoverable := func(format string, args ...any) error {
		return fmt.Errorf("recover shell session %s: %s: %w", h.ID, fmt.Sprintf(format, args...), executor.ErrNotRecoverable)
	}
	if h.Executor != Name {
		return nil, notRecoverable("the handle is of executor %q", h.Executor)
	}
	if !validID.MatchString(h.ID) {
		return nil, notRecoverable("invalid ID")
	}
	base, err := filepath.Abs(e.cfg.Dir)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, h.ID)
	var data handleData
	if len(h.Data) > 0 {
		if err := json.Unmarshal(h.Data, &data); err != nil {
			return nil, notRecoverable("unreadable handle: %v", err)
		}
		if filepath.Clean(data.Dir) != dir {
			return nil, notRecoverable("the handle names %s, not %s", data.Dir, dir)
		}
	}
	if !e.live.Reserve(h.ID) {
		return nil, fmt.Errorf("recover shell session %s: a session with this ID is live in this process", h.ID)
	}
	client := e.newClient(h.ID, dir)
	hello, err := client.Connect(ctx)
	if err != nil {
		e.live.Done(h.ID, nil)
		if errors.Is(err, agent.ErrGone) || errors.Is(err, agent.ErrNotAgent) {
			return nil, notRecoverable("%v", err)
		}
		return nil, fmt.Errorf("recover shell session %s: %w", h.ID, err)
	}
	s := e.newSession(h.ID, dir, hello.Workdir, client, e.userReady(dir, hello.Workdir))
	e.live.Done(h.ID, s)
	return s, nil
}

// Sweep stops the agent of every session directory under Config.Dir whose
// name is not in keep and that no live session of this executor holds (it
// asks the agent to shut down, which kills its steps; an agent that does not
// answer is killed, and so are the process groups of steps it had left
// running), then removes the directory. A missing Config.Dir is not an
// error. Errors of single sessions are joined.
func (e *Executor) Sweep(ctx context.Context, keep []string) error {
	if e.cfg.Dir == "" {
		return nil
	}
	entries, err := os.ReadDir(e.cfg.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep shell sessions: %w", err)
	}
	var errs []error
	for _, ent := range entries {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("sweep shell sessions: %w", err))...)
		}
		name := ent.Name()
		if slices.Contains(keep, name) || e.live.Holds(name) {
			continue
		}
		if err := e.removeSession(ctx, filepath.Join(e.cfg.Dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("sweep shell session %s: %w", name, err))
		} else {
			e.log.Info("removed a session an earlier runner process left", "session", name)
		}
	}
	return errors.Join(errs...)
}

// removeSession stops whatever runs in a session directory and removes it.
func (e *Executor) removeSession(ctx context.Context, dir string) error {
	e.stopAgent(ctx, dir)
	if err := cleanup.RemoveAll(dir, e.log); err != nil {
		return err
	}
	return nil
}

// stopAgent ends the agent of a session directory and every step process
// it left: first by asking it (Shutdown), else by killing what its state
// files name.
func (e *Executor) stopAgent(ctx context.Context, dir string) {
	if _, err := os.Stat(filepath.Join(dir, "agent.sock")); err == nil {
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		c := agent.NewClient(e.dialer(dir), agent.Options{Name: "knotless-run " + version.Version, Retry: 2 * time.Second, Logger: e.log})
		err := c.Shutdown(sctx)
		cancel()
		_ = c.Close()
		if err == nil {
			e.waitAgentGone(dir, 5*time.Second)
			return
		}
	}
	// No answer: kill the agent and its steps' process groups.
	if pid, ok := recordedProcess(filepath.Join(dir, "agent.json")); ok {
		if n := killTreeOf(pid); n > 0 {
			e.log.Info("killed processes of a step agent that did not answer", "dir", dir, "processes", n)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// The steps' own records: a step's cgroup holds every process it
	// started (also those that left its process group, now orphans of
	// init); its process group holds the rest where there is no cgroup.
	steps, _ := os.ReadDir(filepath.Join(dir, "steps"))
	for _, st := range steps {
		rec := filepath.Join(dir, "steps", st.Name(), "proc.json")
		if cg := recordedCgroup(rec); cg != "" {
			if n := stepagent.KillCgroup(cg); n > 0 {
				e.log.Info("killed processes left in the cgroup of a step whose agent was gone", "dir", dir, "cgroup", cg, "processes", n)
			}
		}
		if pid, ok := recordedProcess(rec); ok {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	if cg := recordedCgroup(filepath.Join(dir, "agent.json")); cg != "" {
		_ = os.Remove(cg)
	}
}

// recordedCgroup reads {"cgroup"} from a state file: a cgroup directory
// under /sys/fs/cgroup or another cgroup2 mount; "" when none.
func recordedCgroup(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	var st struct {
		Cgroup string `json:"cgroup"`
	}
	if json.Unmarshal(b, &st) != nil || !filepath.IsAbs(st.Cgroup) {
		return ""
	}
	return filepath.Clean(st.Cgroup)
}

// waitAgentGone waits for the agent recorded in dir to exit.
func (e *Executor) waitAgentGone(dir string, bound time.Duration) {
	pid, ok := recordedProcess(filepath.Join(dir, "agent.json"))
	if !ok {
		return
	}
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if _, ok := recordedProcess(filepath.Join(dir, "agent.json")); !ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// recordedProcess reads {"pid", "startTime"} from a state file and reports
// the PID when that very process is still alive (not a later one reusing
// the PID, not a zombie).
func recordedProcess(file string) (int, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	var st struct {
		PID       int    `json:"pid"`
		StartTime uint64 `json:"startTime"`
	}
	if json.Unmarshal(b, &st) != nil || st.PID <= 1 {
		return 0, false
	}
	t, err := stepagent.ProcStartTime(st.PID)
	if err != nil || t != st.StartTime {
		return 0, false
	}
	if state, err := procState(st.PID); err != nil || state == 'Z' || state == 'X' {
		return 0, false
	}
	return st.PID, true
}

func procState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, errors.New("bad stat")
	}
	return b[i+2], nil
}

// killTreeOf SIGKILLs every descendant of pid and reports how many.
func killTreeOf(pid int) int {
	return stepagent.KillDescendants(pid)
}
