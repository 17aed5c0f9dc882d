package stepagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
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
	// Home is HOME for steps that set none; PATH likewise.
	Home string
	PATH string
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
}

// Agent owns one run's environment: it starts steps detached from any
// client, keeps their output and exit status, and serves clients.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	pid  int
	reap *reaper
	cg   cgroups

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
	log.Info("agent ready", "run", cfg.Run, "pid", a.pid, "kill", a.cg.describe(), "workdir", cfg.Workdir, "version", cfg.Version)
	return a, nil
}

// Kill says how the agent ends a step's processes (for logs).
func (a *Agent) Kill() string { return a.cg.describe() }

// Serve accepts clients on l until Shutdown (nil) or the agent lingered
// past its deadline with no client (nil); other errors are the listener's.
func (a *Agent) Serve(l net.Listener) error {
	go a.idleWatch()
	if a.cfg.ExitWithParent {
		go a.parentWatch()
	}
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

// idleWatch shuts the agent down when nobody will come back: no client
// for Config.Linger after the run's deadline, or for
// Config.ExitWithoutClient at any time.
func (a *Agent) idleWatch() {
	if a.cfg.Deadline.IsZero() && a.cfg.ExitWithoutClient <= 0 {
		return
	}
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
		default:
			continue
		}
		a.Shutdown()
		return
	}
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
		Workdir: a.cfg.Workdir, Home: a.cfg.Home, Compression: []string{agent.CompressionZstd}}
	for _, s := range a.order {
		h.Steps = append(h.Steps, s.info())
	}
	return h
}

// ServeConn speaks the protocol with one client until it leaves.
func (a *Agent) ServeConn(rwc io.ReadWriteCloser) {
	hctx, cancel := context.WithTimeout(context.Background(), max(a.cfg.DeadAfter, agent.DefaultDeadAfter))
	cn, ch, err := agent.AgentHandshake(hctx, rwc, a.hello, a.cfg.Heartbeat, a.cfg.DeadAfter)
	cancel()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			a.log.Warn("client handshake failed", "err", err)
		}
		return
	}
	a.mu.Lock()
	a.clients++
	a.mu.Unlock()
	a.log.Debug("client connected", "client", ch.Client)
	defer func() {
		a.mu.Lock()
		a.clients--
		a.lastSeen = time.Now()
		a.mu.Unlock()
	}()
	h := &connHandler{a: a, cn: cn}
	h.run()
	_ = cn.Close()
}

// connHandler serves one connection's requests in order.
type connHandler struct {
	a  *Agent
	cn *agent.Conn

	stopFollow context.CancelFunc
	followDone chan struct{}

	copyIn *copyIn // an unpacking in progress
}

type copyIn struct {
	pw   *io.PipeWriter
	done chan agent.CopyDone
	h    interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

// decode reads f's JSON payload; one that does not decode means the
// stream is not what the protocol says: the caller ends the connection.
func decode[T any](h *connHandler, f agent.Frame) (T, bool) {
	var v T
	if err := agent.Decode(f.Type, f.Payload, &v); err != nil {
		h.fail(f.Type, "", err)
		return v, false
	}
	return v, true
}

func (h *connHandler) fail(t agent.Type, stepID string, err error) {
	_ = h.cn.WriteJSON(agent.TypeError, agent.Error{For: t.String(), Step: stepID, Message: err.Error()})
}

func (h *connHandler) run() {
	defer h.endFollow()
	defer func() {
		if h.copyIn != nil {
			h.copyIn.pw.CloseWithError(errors.New("connection lost"))
			<-h.copyIn.done
		}
	}()
	for f := range h.cn.Frames() {
		t, p := f.Type, f.Payload
		switch t {
		case agent.TypeStart:
			req, ok := decode[agent.Start](h, f)
			if !ok {
				return
			}
			s, attached, err := h.a.start(&req)
			if err != nil {
				h.fail(t, req.ID, err)
				continue
			}
			if err := h.cn.WriteJSON(agent.TypeStarted, agent.Started{ID: s.id, Attached: attached}); err != nil {
				return
			}
			if req.Detach {
				continue // a service: followed later, by Attach or another Start
			}
			h.follow(s, req.Offset, req.Chunk)
		case agent.TypeAttach:
			req, ok := decode[agent.Attach](h, f)
			if !ok {
				return
			}
			s := h.a.step(req.ID)
			if s == nil {
				h.fail(t, req.ID, errors.New("no such step"))
				continue
			}
			h.follow(s, req.Offset, req.Chunk)
		case agent.TypeStop:
			req, ok := decode[agent.Stop](h, f)
			if !ok {
				return
			}
			h.a.stop(req)
		case agent.TypeSteps:
			if err := h.cn.WriteJSON(agent.TypeStepList, agent.StepList{Steps: h.a.hello(agent.ClientHello{}).Steps}); err != nil {
				return
			}
		case agent.TypeCopyIn:
			req, ok := decode[agent.CopyIn](h, f)
			if !ok {
				return
			}
			h.startCopyIn(req)
		case agent.TypeData:
			if h.copyIn != nil {
				h.copyIn.h.Write(p)
				h.copyIn.n += int64(len(p))
				_, _ = h.copyIn.pw.Write(p) // an unpacking error is reported at DataEnd
			}
			f.Release()
		case agent.TypeDataEnd:
			end, ok := decode[agent.DataEnd](h, f)
			if !ok {
				return
			}
			h.endCopyIn(end)
		case agent.TypeCopyOut:
			req, ok := decode[agent.CopyOut](h, f)
			if !ok {
				return
			}
			h.copyOut(req)
		case agent.TypeShutdown:
			h.a.log.Info("shutdown requested")
			h.a.stopAll()
			_ = h.cn.Write(agent.TypeShutdownDone)
			h.a.Shutdown()
			return
		}
	}
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

// follow streams s's output from off, then its exit, on this connection;
// a follow already running on it is ended first.
func (h *connHandler) follow(s *step, off int64, chunk int) {
	h.endFollow()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.stopFollow, h.followDone = cancel, done
	go func() {
		defer close(done)
		if err := streamOutput(ctx, h.cn, s, off, chunk); err != nil && ctx.Err() == nil {
			h.a.log.Debug("following a step's output ended", "step", s.id, "err", err)
		}
	}()
}

func (h *connHandler) endFollow() {
	if h.stopFollow != nil {
		h.stopFollow()
		<-h.followDone
		h.stopFollow, h.followDone = nil, nil
	}
}

// streamOutput sends s's output from byte off in frames of at most chunk
// bytes, then its Exit, as the output grows, until ctx ends or a write
// fails.
func streamOutput(ctx context.Context, cn *agent.Conn, s *step, off int64, chunk int) error {
	if chunk <= 0 || chunk > agent.OutputChunk {
		chunk = agent.OutputChunk
	}
	buf := make([]byte, chunk)
	for {
		grown := s.growth()
		done := s.isDone() // before size: once done, size is final
		size := s.size.Load()
		switch {
		case off < size:
			n := min(int64(len(buf)), size-off)
			k, err := s.out.ReadAt(buf[:n], off)
			if k > 0 {
				if err := cn.Write(agent.TypeOutput, agent.EncodeOutput(s.id, off), buf[:k]); err != nil {
					return err
				}
				off += int64(k)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			continue
		case done && off > size:
			return cn.WriteJSON(agent.TypeError, agent.Error{For: "attach", Step: s.id,
				Message: fmt.Sprintf("offset %d is past the step's output of %d bytes", off, size)})
		case done:
			return cn.WriteJSON(agent.TypeExit, s.exit)
		}
		select {
		case <-grown:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (h *connHandler) startCopyIn(req agent.CopyIn) {
	if h.copyIn != nil {
		h.copyIn.pw.CloseWithError(errors.New("a new copy began"))
		<-h.copyIn.done
	}
	pr, pw := io.Pipe()
	ci := &copyIn{pw: pw, done: make(chan agent.CopyDone, 1), h: sha256.New()}
	h.copyIn = ci
	go func() {
		var d agent.CopyDone
		t, name, closeTree, err := agent.ResolveIn(h.a.cfg.Workdir, req.Dst)
		if err == nil {
			var r io.Reader
			var closeR func()
			if r, closeR, err = agent.Decompress(pr, req.Compression); err == nil {
				d.Files, err = agent.ExtractTar(context.Background(), r, t, name)
				if err == nil && req.Compression != "" {
					// To the compressed stream's end: its checksum.
					_, err = io.Copy(io.Discard, r)
				}
				closeR()
			}
			closeTree()
		}
		if err != nil {
			d.Error = err.Error()
		}
		pr.CloseWithError(errors.New("unpacking stopped")) // unblock the writer
		ci.done <- d
	}()
}

func (h *connHandler) endCopyIn(end agent.DataEnd) {
	ci := h.copyIn
	if ci == nil {
		h.fail(agent.TypeDataEnd, "", errors.New("no copy in progress"))
		return
	}
	h.copyIn = nil
	if end.Error != "" {
		ci.pw.CloseWithError(errors.New(end.Error))
	} else {
		ci.pw.Close()
	}
	d := <-ci.done
	d.Bytes, d.SHA256 = ci.n, hex.EncodeToString(ci.h.Sum(nil))
	if d.Error == "" && end.Error != "" {
		d.Error = "the sender failed: " + end.Error
	}
	_ = h.cn.WriteJSON(agent.TypeCopyDone, d)
}

// copyOut streams req.Src as a copy-format tar stream.
func (h *connHandler) copyOut(req agent.CopyOut) {
	w := &dataWriter{cn: h.cn, h: sha256.New()}
	t, name, closeTree, err := agent.ResolveIn(h.a.cfg.Workdir, req.Src)
	if err == nil {
		var cw io.WriteCloser
		if cw, err = agent.Compress(w, req.Compression); err == nil {
			err = agent.WriteTar(context.Background(), cw, t, name)
			if cerr := cw.Close(); err == nil {
				err = cerr
			}
		}
		closeTree()
	}
	if err == nil {
		err = w.flush()
	}
	end := agent.DataEnd{Bytes: w.n, SHA256: hex.EncodeToString(w.h.Sum(nil))}
	if err != nil {
		end.Error = err.Error()
		end.NotExist = w.n == 0 && errors.Is(err, fs.ErrNotExist)
	}
	_ = h.cn.WriteJSON(agent.TypeDataEnd, end)
}

// dataWriter cuts a stream into Data frames of agent.DataChunk bytes.
type dataWriter struct {
	cn *agent.Conn
	h  interface {
		io.Writer
		Sum([]byte) []byte
	}
	buf []byte
	n   int64
}

func (w *dataWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, agent.DataChunk)
		}
		k := min(len(p), agent.DataChunk-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == agent.DataChunk {
			if err := w.flush(); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

func (w *dataWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.h.Write(w.buf)
	w.n += int64(len(w.buf))
	err := w.cn.Write(agent.TypeData, w.buf)
	w.buf = w.buf[:0]
	return err
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
