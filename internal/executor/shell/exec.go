package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// DefaultGrace is the time between SIGTERM and SIGKILL when Step.Grace is
// zero.
const DefaultGrace = 10 * time.Second

// Timing of the end of a step; fixed, not configuration.
var (
	// groupGoneWait bounds the wait for a killed process group to die.
	groupGoneWait = 10 * time.Second
	// drainIdle is how long the output pipe may stay silent after the step's
	// process group is gone before we stop reading: only a process that left
	// the group (setsid) can still hold it open then.
	drainIdle = time.Second
	// drainMax bounds reading after the group is gone, however chatty an
	// escaped process is.
	drainMax = 10 * time.Second
)

// Exec runs step: it writes the script to a private 0700 file in the
// session directory, starts Step.Shell (default executor.DefaultShell) with
// the file's path as its last argument, in the checkout, in a new process
// group, with stdin from /dev/null and stdout and stderr on one pipe copied
// to out as bytes arrive. The environment is exactly Step.Env plus
// Step.Secrets (a secret wins over a variable of the same name), plus PATH
// (Config.PATH) and HOME (the session's own directory, Config.Dir/<ID>/home)
// when Step.Env has none.
//
// When the shell exits, the whole process group is killed (SIGKILL), so
// background processes neither keep the step open nor survive it; output
// still buffered is read until the pipe closes, or until it has been silent
// for a second when a process that left the group (setsid) still holds it,
// in which case a marker line says the output was cut.
//
// Step.Timeout and the end of ctx send SIGTERM to the group, then SIGKILL
// after Step.Grace (default DefaultGrace); Reason is then api.ReasonTimeout
// (Step.Timeout, or ctx's deadline passed: the run's timeout) or
// api.ReasonCancelled (ctx canceled). Cleanup during Exec kills the group at once
// (Reason cancelled). ExitCode is the shell's exit status, or 128+N when a
// signal N killed it. Exec returns only when the group is gone (bounded: a
// process that survives SIGKILL for 10 s is logged and left).
//
// err is non-nil when the step could not be started (bad shell, bad
// variable name, a NUL byte in a value, session cleaned up; ExitCode is then
// -1) and also when writing to out failed, in which case the step still ran
// to its end (its remaining output was discarded) and Result is valid. A ctx
// already ended gives its Reason, ExitCode -1 and no error.
func (s *session) Exec(ctx context.Context, step executor.Step, out io.Writer) (executor.Result, error) {
	start := time.Now()
	res := executor.Result{ExitCode: -1}
	done, err := s.beginExec()
	if err != nil {
		return res, fmt.Errorf("run step %q: %w", step.Name, err)
	}
	defer s.endExec(done)
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

	env, pathList, err := s.stepEnv(step)
	if err != nil {
		return res, fmt.Errorf("run step %q: %w", step.Name, err)
	}
	argv := step.Shell
	if len(argv) == 0 {
		argv = executor.DefaultShell
	}
	shellPath, err := lookShell(argv[0], pathList)
	if err != nil {
		return res, fmt.Errorf("run step %q: %w", step.Name, err)
	}
	script, err := s.writeScript(step.Script)
	if err != nil {
		return res, fmt.Errorf("run step %q: %w", step.Name, err)
	}
	defer func() { _ = os.Remove(script) }()

	r, w, err := os.Pipe()
	if err != nil {
		return res, fmt.Errorf("run step %q: output pipe: %w", step.Name, err)
	}
	cmd := &exec.Cmd{
		Path:   shellPath,
		Args:   append(slices.Clip(argv), script),
		Env:    env,
		Dir:    s.workdir,
		Stdout: w, // one pipe for both keeps their order
		Stderr: w,
		// Pdeathsig: if the runner dies without cleaning up (SIGKILL),
		// the kernel kills the shell; what the shell started is killed by
		// the next runner's Sweep from the group record.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return res, fmt.Errorf("run step %q: start %s: %w", step.Name, argv[0], err)
	}
	pgid := cmd.Process.Pid
	if err := recordGroup(s.dir, pgid); err != nil {
		s.exe.log.Warn("could not record the step's process group; a crashed runner may leave its processes behind", "run", s.id, "step", step.Name, "err", err)
	}

	p := &pump{r: r, out: out, done: make(chan struct{})}
	go p.run()

	res.Reason = s.supervise(ctx, pgid, step)
	// The shell has exited but is not reaped, so pgid is still ours.
	signalGroup(pgid, syscall.SIGKILL)
	_ = cmd.Wait() // reaps; a non-zero status is not an error here
	res.ExitCode = exitCode(cmd.ProcessState)

	gone := waitGroupGone(pgid, groupGoneWait)
	if gone {
		forgetGroup(s.dir)
	}
	if !gone {
		s.exe.log.Warn("processes of a step survived SIGKILL", "run", s.id, "step", step.Name, "pgid", pgid)
	}
	cut := p.drain()
	if cut {
		s.exe.log.Warn("a process outside the step's process group held its output open; stopped reading", "run", s.id, "step", step.Name)
		p.writeNote("\n[knotless] output cut: a process that left the step's process group still holds the step's output open\n")
	}
	if !gone {
		p.writeNote("\n[knotless] some of the step's processes did not die after SIGKILL\n")
	}
	res.Duration = time.Since(start)
	if p.werr != nil {
		return res, fmt.Errorf("run step %q: write output: %w", step.Name, p.werr)
	}
	return res, nil
}

// supervise waits for the shell of the group pgid to exit, stopping it on
// timeout, cancel or Cleanup. It returns the Reason.
func (s *session) supervise(ctx context.Context, pgid int, step executor.Step) (reason string) {
	exited := make(chan error, 1)
	go func() { exited <- waitExited(pgid) }()

	var timeout <-chan time.Time
	if step.Timeout > 0 {
		t := time.NewTimer(step.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	grace := step.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	var graceC <-chan time.Time
	ctxDone, closing := ctx.Done(), s.closing
	stop := func(why string) {
		reason = why
		timeout, ctxDone = nil, nil
		signalGroup(pgid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		graceC = t.C
	}
	for {
		select {
		case err := <-exited:
			if err != nil {
				s.exe.log.Warn("waiting for a step's shell failed; reaping it directly", "run", s.id, "step", step.Name, "err", err)
			}
			return reason
		case <-timeout:
			stop(api.ReasonTimeout)
		case <-ctxDone:
			// A deadline on ctx is the run's timeout; any other end of
			// ctx is a cancel.
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				stop(api.ReasonTimeout)
			} else {
				stop(api.ReasonCancelled)
			}
		case <-graceC:
			graceC = nil
			signalGroup(pgid, syscall.SIGKILL)
		case <-closing:
			closing, timeout, ctxDone, graceC = nil, nil, nil, nil
			if reason == "" {
				reason = api.ReasonCancelled
			}
			signalGroup(pgid, syscall.SIGKILL)
		}
	}
}

// exitCode is the shell's exit status, 128+N when signal N killed it.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// stepEnv builds the step's whole environment, sorted by name, and returns
// the PATH it holds (for finding the shell).
func (s *session) stepEnv(step executor.Step) ([]string, string, error) {
	vars := make(map[string]string, len(step.Env)+len(step.Secrets)+2)
	for k, v := range step.Env {
		if err := checkVar(k, v, "variable"); err != nil {
			return nil, "", err
		}
		vars[k] = v
	}
	for k, v := range step.Secrets {
		if err := checkVar(k, v, "secret"); err != nil {
			return nil, "", err
		}
		vars[k] = v
	}
	if _, ok := vars["PATH"]; !ok {
		vars["PATH"] = s.exe.cfg.PATH
	}
	if _, ok := vars["HOME"]; !ok && s.home != "" {
		vars["HOME"] = s.home
	}
	env := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return env, vars["PATH"], nil
}

// checkVar refuses what an environment cannot carry. Its errors name the
// variable, never the value.
func checkVar(name, value, kind string) error {
	switch {
	case name == "":
		return fmt.Errorf("a %s has an empty name", kind)
	case strings.ContainsAny(name, "=\x00"):
		return fmt.Errorf("%s name %q contains '=' or a NUL byte", kind, name)
	case strings.ContainsRune(value, 0):
		return fmt.Errorf("%s %s contains a NUL byte, which an environment cannot carry", kind, name)
	}
	return nil
}

// lookShell finds the shell: a name with a slash is used as is (relative to
// the checkout); a bare name is looked up in the step's PATH (absolute
// entries only), not in the runner's.
func lookShell(name, pathList string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("shell %q not found in the step's PATH %q", name, pathList)
}

// writeScript writes script to a new 0700 file in the session directory.
func (s *session) writeScript(script string) (string, error) {
	f, err := os.CreateTemp(s.dir, "step-*.sh")
	if err != nil {
		return "", fmt.Errorf("write script: %w", err)
	}
	name := f.Name()
	_, err = io.WriteString(f, script)
	if err == nil {
		err = f.Chmod(0o700)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("write script: %w", err)
	}
	return name, nil
}

// pump copies the step's output pipe to out as bytes arrive.
type pump struct {
	r      *os.File
	out    io.Writer
	exitAt atomic.Int64 // UnixNano when drain began; 0 before
	done   chan struct{}
	werr   error // first error writing to out; read after done
	cut    bool  // stopped reading with the pipe still held open
}

func (p *pump) run() {
	defer close(p.done)
	buf := make([]byte, 64<<10)
	w := p.out
	lastRead := time.Now()
	for {
		n, err := p.r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil && p.werr == nil {
				p.werr = werr
				w = io.Discard // keep draining so the step never blocks on a full pipe
			}
			lastRead = time.Now()
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			now := time.Now()
			if now.Sub(lastRead) >= drainIdle || now.Sub(time.Unix(0, p.exitAt.Load())) >= drainMax {
				p.cut = true
				return
			}
			_ = p.r.SetReadDeadline(now.Add(drainIdle))
		default: // io.EOF: every writer is gone
			return
		}
	}
}

// drain lets the pump read what is left, bounded once the pipe goes quiet,
// then closes the pipe. It reports whether reading was cut short.
func (p *pump) drain() bool {
	now := time.Now()
	p.exitAt.Store(now.UnixNano())
	_ = p.r.SetReadDeadline(now.Add(drainIdle))
	<-p.done
	_ = p.r.Close()
	return p.cut
}

// writeNote adds a line of our own to the step's output, after the pump is done.
func (p *pump) writeNote(s string) {
	if p.werr == nil {
		_, p.werr = io.WriteString(p.out, s)
	}
}
