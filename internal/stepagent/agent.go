package stepagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/cleanup"
)

// Config configures an Agent.
type Config struct {
	// Dir holds the agent's state: DIR/steps/<id>/{script,output,exit.json}
	// and DIR/agent.json. Created (0700) when missing. Required.
	Dir string
	// Workdir is the steps' default working directory (the checkout).
	Workdir string
	// Home is HOME for steps that set none; PATH likewise, unless Base
	// has one.
	Home string
	PATH string
	// PathAppend, when set, is appended to the PATH of every step that
	// sets none (agent.Serve.PathAppend).
	PathAppend string
	// Base, when set, is the environment every step starts from, beneath
	// its own variables (the image's, when the agent is a container's PID
	// 1: ImageBase); HOME and TMPDIR in it are ignored (the agent's own
	// Home and Tmp are the steps', writable).
	Base map[string]string
	// Tmp is TMPDIR for steps that set none: the run's temporary
	// directory, removed with the environment; "" leaves TMPDIR unset.
	Tmp string
	// Run is the environment's ID, reported in the hello.
	Run string
	// Deadline, when set, stops a running step (reason timeout) and refuses
	// new ones from then on: the run's timeout, enforced with no runner.
	Deadline time.Time
	// Linger is how long the agent stays after Deadline with no client
	// connected before it exits (default 10 minutes).
	Linger time.Duration
	// Heartbeat and DeadAfter: see agent.DefaultHeartbeat.
	Heartbeat time.Duration
	DeadAfter time.Duration
	// ExitWithParent makes the agent end its steps and exit when the process
	// that started it is gone (nobody will take the run over).
	ExitWithParent bool
	// ExitWithoutClient, when positive, makes the agent end its steps and
	// exit once no client has been connected for that long: for an agent
	// whose starter cannot be watched as a parent (in a pod) and that
	// nobody takes over (`knotless-run exec`).
	ExitWithoutClient time.Duration
	// NoCgroups makes the agent rely on being a child subreaper alone, even
	// where it could give steps cgroups.
	NoCgroups bool
	// User, when set, is the user every step runs as (the agent itself
	// must then run as root): see StepUser.
	User *StepUser
	// Version is the agent's program version.
	Version string
	Logger  *slog.Logger
	// Nproc (> 0) is every step's process limit (agent.Serve.Nproc),
	// applied only in a user namespace of the agent's own.
	Nproc int
}

// Agent owns one run's environment: it starts steps detached from any
// client, keeps their output and exit status, and serves clients.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	pid  int
	reap *reaper
	cg   cgroups
	// uidMap is the agent's /proc/self/uid_map; nproc the steps'
	// process limit in force (Config.Nproc where the namespace is the
	// agent's own, else 0).
	uidMap string
	nproc  int

	mu       sync.Mutex
	steps    map[string]*step
	order    []*step
	running  *step
	clients  int
	lastSeen time.Time // when the last client left
	shutdown chan struct{}
	shutOnce sync.Once
}

// New prepares an agent: it makes Dir, becomes a child subreaper, starts
// reaping children and detects whether steps get cgroups. Only one Agent
// may exist per process.
func New(cfg Config) (*Agent, error) {
	if cfg.Dir == "" {
		return nil, errors.New("stepagent: Config.Dir is required")
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 10 * time.Minute
	}
	if cfg.PATH == "" {
		cfg.PATH = "/usr/local/bin:/usr/bin:/bin"
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "steps"), 0o700); err != nil {
		return nil, fmt.Errorf("stepagent: state directory: %w", err)
	}
	if err := becomeSubreaper(); err != nil {
		return nil, fmt.Errorf("stepagent: become a child subreaper: %w", err)
	}
	cg := cgroups{reason: "switched off"}
	if !cfg.NoCgroups {
		cg = detectCgroups()
	}
	a := &Agent{
		cfg: cfg, log: log, pid: os.Getpid(), reap: newReaper(), cg: cg,
		steps: map[string]*step{}, lastSeen: time.Now(), shutdown: make(chan struct{}),
	}
	var own bool
	a.uidMap, own = ownUserNamespace()
	if cfg.Nproc > 0 {
		if own {
			a.nproc = cfg.Nproc
		} else {
			log.Warn("no process limit for the steps: the agent is not in a user namespace of its own, where RLIMIT_NPROC would count every process of its uid on the machine", "nproc", cfg.Nproc, "uid_map", a.uidMap)
		}
	}
	log.Info("agent ready", "run", cfg.Run, "pid", a.pid, "kill", a.cg.describe(), "workdir", cfg.Workdir, "version", cfg.Version)
	return a, nil
}

// KillMethod describes how the agent finds and ends every process of a
// step (a cgroup per step, or the child subreaper), for logs and the
// hello's Kill field.
func (a *Agent) KillMethod() string { return a.cg.describe() }

// Serve accepts clients on l until Shutdown (nil) or the agent lingered
// past its deadline with no client (nil); other errors are the listener's.
func (a *Agent) Serve(l net.Listener) error {
	go a.idleWatch()
	if a.cfg.ExitWithParent {
		go a.parentWatch()
	}
	return a.accept(l)
}

// accept serves clients from l until Shutdown (nil) or l fails.
func (a *Agent) accept(l net.Listener) error {
	go func() {
		<-a.shutdown
		_ = l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case <-a.shutdown:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go a.ServeConn(c)
	}
}

// Shutdown kills the running step at once, waits for its processes to be
// gone, and makes Serve return. Idempotent.
func (a *Agent) Shutdown() {
	a.stopAll()
	a.shutOnce.Do(func() {
		a.cg.remove()
		close(a.shutdown)
	})
}

// Done is closed once the agent shut down.
func (a *Agent) Done() <-chan struct{} { return a.shutdown }

// adopt makes a warm agent serve req's run from now on (agent.Adopt).
// Errors: a step started already, an invalid run ID.
func (a *Agent) adopt(req agent.Adopt) error {
	if !agent.ValidID(req.Run) {
		return fmt.Errorf("adopt: the run ID %q is not valid: use %s", req.Run, agent.IDRule)
	}
	a.mu.Lock()
	if len(a.order) > 0 {
		a.mu.Unlock()
		return fmt.Errorf("adopt: this agent serves run %s and started a step already: a warm environment serves one run", a.cfg.Run)
	}
	from := a.cfg.Run
	a.cfg.Run = req.Run
	if req.DeadlineMS > 0 {
		a.cfg.Deadline = time.UnixMilli(req.DeadlineMS)
	}
	a.mu.Unlock()
	a.log.Info("adopted by a run", "warm", from, "run", req.Run)
	if err := a.WriteState(nil); err != nil {
		a.log.Warn("cannot record the agent's state", "err", err)
	}
	return nil
}

// idleWatch shuts the agent down when nobody will come back: no client
// for Config.Linger after the run's deadline (which an adoption may set
// later), or for Config.ExitWithoutClient at any time, or no client and
// Config.Dir removed (its state, and on a host its socket, are gone: a
// runner that removed the run's directory, or a test's that ended).
func (a *Agent) idleWatch() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.shutdown:
			return
		case <-t.C:
		}
		a.mu.Lock()
		none := a.clients == 0
		lingered := none && !a.cfg.Deadline.IsZero() && a.running == nil && time.Now().After(a.cfg.Deadline) &&
			time.Since(a.lastSeen) > a.cfg.Linger && time.Since(a.cfg.Deadline) > a.cfg.Linger
		alone := none && a.cfg.ExitWithoutClient > 0 && time.Since(a.lastSeen) > a.cfg.ExitWithoutClient
		a.mu.Unlock()
		switch {
		case lingered:
			a.log.Warn("the run's deadline passed and no runner came back: exiting", "deadline", a.cfg.Deadline, "linger", a.cfg.Linger)
		case alone:
			a.log.Warn("no client for a while and nobody takes the run over: ending the steps and exiting", "after", a.cfg.ExitWithoutClient)
		case none && dirGone(a.cfg.Dir):
			a.log.Warn("the agent's directory is gone, and with it what a runner would take the run over by: ending the steps and exiting", "dir", a.cfg.Dir)
		default:
			continue
		}
		a.Shutdown()
		return
	}
}

// dirGone reports whether dir no longer exists (any other error of
// stat, a permission, says nothing).
func dirGone(dir string) bool {
	_, err := os.Stat(dir)
	return errors.Is(err, os.ErrNotExist)
}

// parentWatch shuts the agent down once the process that started it is
// gone (the agent is then re-parented, so its parent PID changes).
func (a *Agent) parentWatch() {
	parent := os.Getppid()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-a.shutdown:
			return
		case <-t.C:
		}
		if os.Getppid() != parent {
			a.log.Warn("the process that started the agent is gone and nobody takes the run over: ending the steps and exiting")
			a.Shutdown()
			if err := cleanup.RemoveAll(a.cfg.Dir, a.log); err != nil {
				a.log.Warn("remove the agent's directory", "err", err)
			}
			return
		}
	}
}

// hello describes the agent to a client.
func (a *Agent) hello(ch agent.ClientHello) agent.AgentHello {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := agent.AgentHello{Agent: a.cfg.Version, Run: a.cfg.Run, PID: a.pid, Kill: a.cg.describe(),
		Workdir: a.cfg.Workdir, Home: a.cfg.Home, Compression: []string{agent.CompressionZstd},
		UID: os.Getuid(), UIDMap: a.uidMap, Nproc: a.nproc, Capabilities: capabilities}
	for _, s := range a.order {
		h.Steps = append(h.Steps, s.info())
	}
	return h
}

// step returns the step with id, or nil.
func (a *Agent) step(id string) *step {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.steps[id]
}

// start starts req, or returns the step it started before under req.ID.
func (a *Agent) start(req *agent.Start) (*step, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.steps[req.ID]; s != nil {
		for _, v := range req.Env {
			clear(v)
		}
		return s, true, nil
	}
	select {
	case <-a.shutdown:
		return nil, false, errors.New("the agent is shutting down")
	default:
	}
	if a.running != nil && !req.Detach {
		return nil, false, fmt.Errorf("step %s is still running; steps run one at a time", a.running.id)
	}
	if !a.cfg.Deadline.IsZero() && time.Now().After(a.cfg.Deadline) {
		return nil, false, fmt.Errorf("the run's deadline (%s) has passed", a.cfg.Deadline.Format(time.RFC3339))
	}
	s, err := a.startStep(req)
	if err != nil {
		return nil, false, err
	}
	a.steps[s.id] = s
	a.order = append(a.order, s)
	if !s.detached {
		a.running = s
	}
	return s, false, nil
}

// stop hands a Stop to its step's supervisor.
func (a *Agent) stop(req agent.Stop) {
	s := a.step(req.ID)
	if s == nil || s.isDone() {
		return
	}
	select {
	case s.stopCh <- req:
	default: // a stop is pending already
	}
}

// stopAll kills the running step and every detached one at once and waits
// for them to end.
func (a *Agent) stopAll() {
	a.mu.Lock()
	var live []*step
	for _, s := range a.order {
		if !s.isDone() {
			live = append(live, s)
		}
	}
	a.mu.Unlock()
	for _, s := range live {
		select {
		case s.stopCh <- agent.Stop{ID: s.id, Reason: "cancelled", GraceMS: 0}:
		default:
			// The channel is full of earlier stops; one of them may have a
			// grace: kill now so shutdown is prompt.
			killTree(a.pid, killBound, nil)
		}
	}
	for _, s := range live {
		<-s.done
	}
}

// spared names the processes of the detached steps still running (their
// process groups and cgroups): the end of another step leaves them alone.
func (a *Agent) spared() *spared {
	a.mu.Lock()
	defer a.mu.Unlock()
	var sp *spared
	for _, s := range a.order {
		if s.detached && !s.isDone() {
			if sp == nil {
				sp = &spared{pgids: map[int]bool{}, pids: map[int]bool{}}
			}
			sp.pgids[s.pgid] = true
			if s.cgDir != "" {
				for _, pid := range cgroupProcs(s.cgDir) {
					sp.pids[pid] = true
				}
			}
		}
	}
	return sp
}

// WriteState records the agent's identity in DIR/agent.json: pid, the
// process's start time (clock ticks since boot, /proc/PID/stat field 22, so
// that a later process reusing the PID is told apart), version and run.
func (a *Agent) WriteState(extra map[string]any) error {
	st := map[string]any{"pid": a.pid, "run": a.cfg.Run, "version": a.cfg.Version, "kill": a.cg.describe()}
	if a.cg.usable() {
		st["cgroup"] = a.cg.base
	}
	if t, err := ProcStartTime(a.pid); err == nil {
		st["startTime"] = t
	}
	for k, v := range extra {
		st[k] = v
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(a.cfg.Dir, "agent.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(a.cfg.Dir, "agent.json"))
}

// ImageBase is environ (NAME=VALUE entries, as os.Environ gives them) as a
// step's base environment: what a container runtime gave the agent as
// PID 1 (the image's ENV, the runtime's own such as HOSTNAME), without
// what a shell between the runtime and the agent added (PWD, OLDPWD,
// SHLVL, _).
func ImageBase(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		switch k {
		case "PWD", "OLDPWD", "SHLVL", "_":
			continue
		}
		m[k] = v
	}
	return m
}

// guardEvery is how often Guard looks at the socket and the program.
const guardEvery = 500 * time.Millisecond

// Guard keeps what a new connection to the agent needs where the runner
// looks for it, while the agent runs steps as its own user (a pod's
// runAsUser), who may delete or overwrite it: the socket at socket (when
// the file is gone or another one, the agent listens there again) and,
// when program is not empty, the agent's program at program, which the
// exec bridge runs (`knotless-agent connect`; restored from the running
// agent's own executable when missing or changed). Without it, a step
// that removed them left its runner unable to re-attach after a dropped
// stream: the run ended two minutes later, its last output lost. It
// returns at Shutdown.
func (a *Agent) Guard(socket, program string) {
	sockID, _ := fileID(socket)
	progID, _ := fileID(program)
	t := time.NewTicker(guardEvery)
	defer t.Stop()
	for {
		select {
		case <-a.shutdown:
			return
		case <-t.C:
		}
		if id, err := fileID(socket); err != nil || id != sockID {
			l, err := agent.ListenUnix(socket)
			if err != nil {
				a.log.Warn("the agent's socket was removed by a step and cannot be made again", "socket", socket, "err", err)
				continue
			}
			sockID, _ = fileID(socket)
			a.log.Warn("the agent's socket was removed or replaced (by a step?): listening there again", "socket", socket)
			go func() { _ = a.accept(l) }()
		}
		if program == "" {
			continue
		}
		if id, err := fileID(program); err != nil || id != progID {
			if err := restoreProgram(program); err != nil {
				a.log.Warn("the agent's program was removed or changed (by a step?) and cannot be restored", "program", program, "err", err)
				continue
			}
			progID, _ = fileID(program)
			a.log.Warn("the agent's program was removed or changed (by a step?): restored", "program", program)
		}
	}
}

// fileIdentity is a file as it is now: its inode, size and modification
// time.
type fileIdentity struct {
	ino, size int64
	mtime     int64
}

// fileID is the identity of the file at path.
func fileID(path string) (fileIdentity, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileIdentity{}, err
	}
	id := fileIdentity{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = int64(st.Ino)
	}
	return id, nil
}

// restoreProgram writes the running executable (/proc/self/exe) to path,
// mode 0500, replacing whatever is there.
func restoreProgram(path string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := path + ".restore"
	_ = os.Remove(tmp)
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o500)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
