package stepagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/agent"
)

// DefaultGrace is a stopped step's SIGTERM → SIGKILL time when the Stop or
// Start names none.
const DefaultGrace = 10 * time.Second

// killBound bounds the wait for a step's processes to die after SIGKILL.
const killBound = 10 * time.Second

// step is one started step: its output file grows while it runs; exit is
// set, and done closed, once every process of it is gone and the output is
// final.
type step struct {
	id       string
	detached bool   // Start.Detach: runs beside later steps
	pgid     int    // its process group (the shell's PID)
	cgDir    string // its cgroup; "" without one
	dir      string
	started  time.Time
	grace    time.Duration
	out      *os.File // for reading (ReadAt), shared by followers

	size atomic.Int64 // output bytes written so far

	oomBefore uint64 // OOM kills counted when the step started (oomKills)
	oomKnown  bool   // whether they could be counted

	mu      sync.Mutex
	grown   chan struct{} // closed and replaced whenever size grows
	stopped string        // the reason of the first Stop; "" when none
	stopCh  chan agent.Stop
	exit    agent.Exit
	done    chan struct{}
}

func (s *step) isDone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// growth returns a channel closed when the output grows past what it is
// now (or the step ends).
func (s *step) growth() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grown
}

func (s *step) wrote(n int) {
	s.size.Add(int64(n))
	s.mu.Lock()
	close(s.grown)
	s.grown = make(chan struct{})
	s.mu.Unlock()
}

func (s *step) info() agent.StepInfo {
	in := agent.StepInfo{ID: s.id, Size: s.size.Load(), Running: !s.isDone(), Detached: s.detached}
	if !in.Running {
		ex := s.exit
		in.Exit = &ex
	}
	return in
}

// startStep starts req as a new step (the caller holds a.mu and checked
// that req.ID is new and no step runs).
func (a *Agent) startStep(req *agent.Start) (*step, error) {
	if !agent.ValidID(req.ID) {
		return nil, fmt.Errorf("step ID %q: use %s", req.ID, agent.IDRule)
	}
	env, pathList, err := a.stepEnv(req.Env)
	// Secrets are in req.Env: keep them no longer than the execve needs.
	defer func() {
		for _, v := range req.Env {
			clear(v)
		}
		req.Env = nil
	}()
	if err != nil {
		return nil, err
	}
	argv := req.Shell
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-e"}
	}
	dir := req.Dir
	if dir == "" {
		dir = a.cfg.Workdir
	}
	shellPath, err := lookShell(argv[0], pathList, dir)
	if err != nil {
		return nil, err
	}
	sdir := filepath.Join(a.cfg.Dir, "steps", req.ID)
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return nil, fmt.Errorf("create step directory: %w", err)
	}
	script := filepath.Join(sdir, "script")
	if err := os.WriteFile(script, req.Script, 0o700); err != nil {
		return nil, fmt.Errorf("write script: %w", err)
	}
	if err := a.giveScript(script); err != nil {
		return nil, err
	}
	f, err := openStepFiles(filepath.Join(sdir, "output"))
	if err != nil {
		return nil, err
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Credential: a.cfg.User.credential()}
	cgDir := ""
	if a.cg.usable() {
		d, fd, err := a.cg.create(req.ID)
		if err != nil {
			a.log.Warn("could not make the step's cgroup; relying on the subreaper", "step", req.ID, "err", err)
		} else {
			cgDir = d
			inCgroup(sys, fd)
			defer syscall.Close(fd)
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{f.devnull.Fd(), f.pw.Fd(), f.pw.Fd()},
		Sys:   sys,
	}
	start := time.Now()
	oomBefore, oomKnown := oomKills(cgDir)
	path, args := shellPath, append(slices.Clip(argv), script)
	if a.nproc > 0 {
		path, args = limitedArgv(a.nproc, path, args)
	}
	pid, waitCh, err := a.reap.forkExec(path, args, attr)
	if err == nil {
		preferOOMVictim(pid)
	}
	clear(env)
	f.started()
	if err != nil {
		f.close()
		if cgDir != "" {
			_ = os.Remove(cgDir)
		}
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	recordProc(sdir, pid, cgDir)
	s := &step{
		id: req.ID, dir: sdir, started: start, out: f.rf, detached: req.Detach, pgid: pid, cgDir: cgDir,
		grace: time.Duration(req.GraceMS) * time.Millisecond,
		grown: make(chan struct{}), stopCh: make(chan agent.Stop, 4), done: make(chan struct{}),
	}
	if s.grace <= 0 {
		s.grace = DefaultGrace
	}
	pumped := make(chan error, 1)
	go func() { pumped <- pump(f.pr, f.wf, s) }()
	s.oomBefore, s.oomKnown = oomBefore, oomKnown
	go a.supervise(s, pid, cgDir, waitCh, pumped, time.Duration(req.TimeoutMS)*time.Millisecond)
	a.log.Info("step started", "step", req.ID, "pid", pid)
	return s, nil
}

// stepFiles are the files a step's process starts with: its output file
// (wf, appended to by pump; rf, read by those who follow the output), the
// pipe its stdout and stderr write to (pw; pump reads pr) and /dev/null as
// its stdin.
type stepFiles struct {
	wf, rf, pr, pw, devnull *os.File
}

// openStepFiles creates the output file at outPath (truncated) and the
// pipe (1 MiB where the kernel allows, growPipe). Its error names what
// failed; nothing is left open then.
func openStepFiles(outPath string) (*stepFiles, error) {
	f := &stepFiles{}
	var err error
	if f.wf, err = os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600); err != nil {
		return nil, fmt.Errorf("create output file: %w", err)
	}
	if f.rf, err = os.Open(outPath); err != nil {
		f.close()
		return nil, fmt.Errorf("open output file: %w", err)
	}
	if f.pr, f.pw, err = os.Pipe(); err != nil {
		f.close()
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	growPipe(f.pw)
	if f.devnull, err = os.Open(os.DevNull); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// started closes the process's ends (stdin and the pipe's write end),
// which the forked process holds now.
func (f *stepFiles) started() {
	f.devnull.Close()
	f.pw.Close()
	f.devnull, f.pw = nil, nil
}

// close closes every file still open (a step that did not start).
func (f *stepFiles) close() {
	for _, c := range []*os.File{f.wf, f.rf, f.pr, f.pw, f.devnull} {
		if c != nil {
			c.Close()
		}
	}
}

// recordProc writes the step's proc.json (pid, its start time, cgroup) so
// that whoever cleans up after a dead agent can still kill the step's
// process group. Best effort: a step runs without it.
func recordProc(sdir string, pid int, cgDir string) {
	st, err := ProcStartTime(pid)
	if err != nil {
		return
	}
	rec := map[string]any{"pid": pid, "startTime": st}
	if cgDir != "" {
		rec["cgroup"] = cgDir
	}
	if b, err := json.Marshal(rec); err == nil {
		_ = os.WriteFile(filepath.Join(sdir, "proc.json"), b, 0o600)
	}
}

// growPipe asks for a 1 MiB pipe buffer (F_SETPIPE_SZ), so that a chatty
// step blocks less often; best effort.
func growPipe(f *os.File) {
	const fSetPipeSz = 1031
	_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), fSetPipeSz, 1<<20)
}

// pump copies the step's output pipe to its output file until every
// writer is gone, announcing each write to the followers.
func pump(r *os.File, w *os.File, s *step) error {
	defer r.Close()
	defer w.Close()
	buf := make([]byte, 1<<20) // the pipe's size (growPipe)
	var werr error
	for {
		n, err := r.Read(buf)
		if n > 0 && werr == nil {
			var k int
			k, werr = w.Write(buf[:n])
			if k > 0 {
				s.wrote(k)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return werr
			}
			return errors.Join(werr, err)
		}
	}
}

// supervise waits for the step's shell to exit, stopping it on timeout,
// Stop or the agent's deadline (waitStep); then it kills whatever the step
// left, waits for the output to end and records the exit (endStep).
func (a *Agent) supervise(s *step, pid int, cgDir string, waitCh <-chan syscall.WaitStatus, pumped <-chan error, timeout time.Duration) {
	ws, reason := a.waitStep(s, pid, cgDir, waitCh, timeout)
	a.endStep(s, pid, cgDir, ws, reason, pumped)
}

// waitStep waits for the step's shell (pid) to exit and returns its wait
// status and why it was stopped ("" when it ended on its own): at timeout
// (0: none) or the agent's deadline ("timeout"), or a Stop (its reason),
// it sends SIGTERM to every process of the step, and SIGKILL after the
// grace (the Stop's, else the step's).
func (a *Agent) waitStep(s *step, pid int, cgDir string, waitCh <-chan syscall.WaitStatus, timeout time.Duration) (syscall.WaitStatus, string) {
	var timeoutC, deadlineC, graceC <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	if !a.cfg.Deadline.IsZero() {
		t := time.NewTimer(time.Until(a.cfg.Deadline))
		defer t.Stop()
		deadlineC = t.C
	}
	reason := ""
	// A detached step's processes are its process group and cgroup; any
	// other step's are every process of the agent's tree but the detached
	// steps'.
	signalAll := func(sig syscall.Signal) {
		_ = syscall.Kill(-pid, sig)
		if cgDir != "" {
			signalCgroup(cgDir, sig)
		}
		if !s.detached {
			signalTree(a.pid, sig, a.spared())
		}
	}
	stop := func(why string, grace time.Duration) {
		if reason == "" {
			reason = why
			s.mu.Lock()
			s.stopped = why
			s.mu.Unlock()
			a.log.Info("stopping step", "step", s.id, "reason", why, "grace", grace)
		}
		timeoutC, deadlineC = nil, nil
		if grace <= 0 {
			graceC = nil
			signalAll(syscall.SIGKILL)
			return
		}
		if graceC == nil {
			signalAll(syscall.SIGTERM)
			graceC = time.After(grace)
		}
	}
	var ws syscall.WaitStatus
wait:
	for {
		select {
		case ws = <-waitCh:
			break wait
		case <-timeoutC:
			stop("timeout", s.grace)
		case <-deadlineC:
			stop("timeout", s.grace)
		case req := <-s.stopCh:
			grace := time.Duration(req.GraceMS) * time.Millisecond
			if req.GraceMS < 0 {
				grace = s.grace
			}
			stop(req.Reason, grace)
		case <-graceC:
			graceC = nil
			signalAll(syscall.SIGKILL)
		}
	}
	return ws, reason
}

// endStep runs once the step's shell (pid) is gone: nothing of the step
// may outlive it, so it kills what is left (its cgroup, its process group
// or the agent's tree), waits up to 2 s for the output to end, reads the
// kernel's OOM kills (the step is then oom-killed, whatever its exit
// code), and records the exit (exit.json, s.exit) for Attach and Exit.
func (a *Agent) endStep(s *step, pid int, cgDir string, ws syscall.WaitStatus, reason string, pumped <-chan error) {
	note := ""
	outputLost := false
	gone := true
	if cgDir != "" {
		gone = killCgroup(cgDir, killBound)
	}
	if s.detached {
		if !killGroup(pid, killBound) {
			gone = false
		}
	} else if !killTree(a.pid, killBound, a.spared()) {
		gone = false
	}
	if !gone {
		a.log.Warn("processes of a step survived SIGKILL", "step", s.id)
		note = "some of the step's processes did not die after SIGKILL"
	}
	select {
	case err := <-pumped:
		if err != nil {
			a.log.Error("writing the step's output failed", "step", s.id, "err", err)
			note = joinNote(note, "the agent could not store all of the step's output: "+err.Error())
			outputLost = true
		}
	case <-time.After(2 * time.Second):
		// Every process of ours is dead, yet the pipe is held: something
		// outside the agent's tree got it (passed over a socket).
		a.log.Warn("the step's output is held open by a process outside the agent's reach; stopped reading", "step", s.id)
		note = joinNote(note, "output cut: a process the agent cannot reach still holds the step's output open")
	}
	// A process of the step killed by the kernel for want of memory (the
	// container's or the step's limit) makes the step oom-killed, whatever
	// its exit code: a shell whose child was killed may still exit 0.
	if reason == "" && s.oomKnown {
		if n, ok := oomKills(cgDir); ok && n > s.oomBefore {
			reason = "oom-killed"
			note = joinNote(note, fmt.Sprintf("the kernel killed %d of the step's processes for exceeding the memory limit", n-s.oomBefore))
		}
	}
	ex := agent.Exit{
		ID: s.id, ExitCode: exitCode(ws), Reason: reason,
		Size: s.size.Load(), DurationMS: time.Since(s.started).Milliseconds(), Note: note,
		OutputLost: outputLost,
	}
	if b, err := json.Marshal(ex); err == nil {
		_ = os.WriteFile(filepath.Join(s.dir, "exit.json"), b, 0o600)
	}
	_ = os.Remove(filepath.Join(s.dir, "script"))
	a.mu.Lock()
	s.exit = ex
	close(s.done)
	s.mu.Lock()
	close(s.grown)
	s.grown = make(chan struct{})
	s.mu.Unlock()
	if a.running == s {
		a.running = nil
	}
	a.mu.Unlock()
	a.log.Info("step ended", "detached", s.detached, "step", s.id, "exit_code", ex.ExitCode, "reason", ex.Reason, "output_bytes", ex.Size, "duration", time.Duration(ex.DurationMS)*time.Millisecond)
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// stepEnv builds the step's environment (sorted) from the Start's, adding
// PATH, HOME and TMPDIR when absent; it returns the PATH for finding the shell.
// Errors name the variable, never its value.
func (a *Agent) stepEnv(in map[string][]byte) ([]string, string, error) {
	names := make([]string, 0, len(in)+2)
	for k, v := range in {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return nil, "", fmt.Errorf("variable name %q is empty or contains '=' or a NUL byte", k)
		case slices.Contains(v, 0):
			return nil, "", fmt.Errorf("variable %s contains a NUL byte, which an environment cannot carry", k)
		}
		names = append(names, k)
	}
	for k := range a.cfg.Base {
		if _, own := in[k]; !own && k != "HOME" && k != "TMPDIR" && k != "PATH" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	env := make([]string, 0, len(names)+2)
	for _, k := range names {
		if v, ok := in[k]; ok {
			env = append(env, k+"="+string(v))
		} else {
			env = append(env, k+"="+a.cfg.Base[k])
		}
	}
	path := a.cfg.PATH
	if p, ok := a.cfg.Base["PATH"]; ok {
		path = p
	}
	if v, ok := in["PATH"]; ok {
		path = string(v)
	} else {
		if a.cfg.PathAppend != "" {
			path += ":" + a.cfg.PathAppend
		}
		env = append(env, "PATH="+path)
	}
	if _, ok := in["HOME"]; !ok && a.cfg.Home != "" {
		env = append(env, "HOME="+a.cfg.Home)
	}
	if _, ok := in["TMPDIR"]; !ok && a.cfg.Tmp != "" {
		env = append(env, "TMPDIR="+a.cfg.Tmp)
	}
	if u := a.cfg.User; u != nil {
		for _, k := range []string{"USER", "LOGNAME"} {
			if _, ok := in[k]; !ok {
				env = append(env, k+"="+u.Name)
			}
		}
	}
	return env, path, nil
}

// lookShell finds the shell: a name with a slash is used as is (relative
// to dir); a bare name is looked up in the step's PATH (absolute entries
// only).
func lookShell(name, pathList, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("shell %q not found in the step's PATH %q", name, pathList)
}
