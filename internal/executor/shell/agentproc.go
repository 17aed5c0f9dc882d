package shell

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/stepagent"
	"knotless.dev/knotless/internal/version"
)

// startAgent starts `knotless-agent serve` for a session directory and
// waits until it listens. The agent gets a minimal environment (PATH only:
// nothing of the runner's), its own session (setsid: no signal to the
// runner's process group or terminal reaches it), and no death signal, so
// it outlives the runner.
func (e *Executor) startAgent(ctx context.Context, bin, dir string, serve agent.Serve) error {
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
	serve.ReadyFD = 3 // ExtraFiles[0]
	args := append(serve.Args(), e.cfg.AgentArgs...)
	cmd := &exec.Cmd{
		Path:        bin,
		Args:        append([]string{agentenv.AgentName}, args...),
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
