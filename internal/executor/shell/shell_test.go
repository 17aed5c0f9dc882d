package shell_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testenv"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/executortest"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/syncbuf"
)

// newSession prepares a session over a fresh workspace.
func newSession(t *testing.T, cfg shell.Config, spec executor.Spec) (*shell.Executor, executor.Session) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "shell")
	}
	if cfg.Agent == "" {
		cfg.Agent = agenttest.Binary(t)
	}
	// Agents end with the test binary, also when it is killed (a -timeout).
	cfg.Ephemeral = true
	if spec.ID == "" {
		spec.ID = "run-1"
	}
	if spec.Workspace == "" {
		spec.Workspace = t.TempDir()
	}
	e := shell.New(cfg)
	s, err := e.Prepare(context.Background(), spec)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	return e, s
}

// harness runs the shared suite against the shell executor: each
// scenario gets its own executor directory, which restarted executors share.
func harness(agentArgs ...string) executortest.Harness {
	dirs := map[*testing.T]string{}
	dirOf := func(t *testing.T) string {
		if d, ok := dirs[t]; ok {
			return d
		}
		d := filepath.Join(t.TempDir(), "shell")
		dirs[t] = d
		return d
	}
	return executortest.Harness{
		Executor: func(t *testing.T) func() executor.Executor {
			cfg := shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true}, Dir: dirOf(t), AgentArgs: agentArgs}
			return func() executor.Executor { return shell.New(cfg) }
		},
		Spec: func(t *testing.T, id string) executor.Spec {
			return executor.Spec{ID: id, Workspace: t.TempDir()}
		},
		Env: func(t *testing.T, s executor.Session) executortest.Env {
			return executortest.Env{Procs: executortest.HostProcs, NewGate: executortest.FifoGate(s.Workdir())}
		},
		Leftovers: func(t *testing.T, id string) []string {
			dir := filepath.Join(dirOf(t), id)
			var left []string
			if _, err := os.Lstat(dir); err == nil {
				left = append(left, "directory "+dir)
			}
			procs, err := executortest.HostProcs()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range procs {
				if !p.Dead() && bytes.Contains(p.Argv, []byte("\x00"+dir+"\x00")) {
					left = append(left, fmt.Sprintf("process %d %q", p.PID, p.Argv))
				}
			}
			return left
		},
	}
}

// TestShell runs the suite with the agent's defaults: on a machine with a
// delegated cgroup v2 hierarchy, steps get cgroups.
func TestShell(t *testing.T) {
	executortest.Run(t, harness())
}

// TestShell_SubreaperOnly runs the suite with the agent relying on being a
// child subreaper alone, as on a cgroup v1 host or in a container whose
// cgroup is read-only.
func TestShell_SubreaperOnly(t *testing.T) {
	executortest.Run(t, harness("--no-cgroups"))
}

func exec(t *testing.T, s executor.Session, step executor.Step) (executor.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out syncbuf.Buffer
	res, err := s.Exec(ctx, step, &out)
	if err != nil {
		t.Fatalf("Exec: %v (output %q)", err, out.String())
	}
	return res, out.String()
}

// alive reports whether process pid of this host runs (a zombie does
// not).
func alive(pid int) bool {
	p, ok := executortest.HostProc(pid)
	return ok && !p.Dead()
}

// A process that left the step's process group and session (setsid) and
// holds the step's output open neither hangs the step (gitlab-runner #2880)
// nor survives it: the agent is its subreaper and kills it when the step's
// shell exits.
func TestShell_SetsidProcessHoldingOutputDiesWithStep(t *testing.T) {
	_, s := newSession(t, shell.Config{}, executor.Spec{})
	res, out := exec(t, s, executor.Step{Script: `mkfifo up
setsid sh -c 'echo up > up; exec sleep 1000' &
echo "bg $!"
read x < up
echo done
`})
	var bg int
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(line, "bg "); ok {
			bg, _ = strconv.Atoi(strings.TrimSpace(rest))
		}
	}
	if bg == 0 {
		t.Fatalf("no bg line in %q", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(bg, syscall.SIGKILL) })
	if res.ExitCode != 0 || res.Reason != "" || res.Note != "" {
		t.Errorf("result %+v, want exit 0 without a note", res)
	}
	if res.Duration > 20*time.Second {
		t.Errorf("step took %v: the escaped process held it", res.Duration)
	}
	if out != fmt.Sprintf("bg %d\ndone\n", bg) {
		t.Errorf("output %q: want the step's two lines", out)
	}
	if alive(bg) {
		t.Errorf("the escaped process %d outlived the step", bg)
	}
}

func TestShell_PrepareTellsSetupLogWhatItIgnores(t *testing.T) {
	var log bytes.Buffer
	_, _ = newSession(t, shell.Config{}, executor.Spec{Image: "golang:1.26", CPUs: "2", MemoryBytes: 1 << 30, Log: &log})
	for _, want := range []string{"directly on this host", "trusted repositories only", "ignores image golang:1.26", "ignores resource limits"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("setup log %q lacks %q", log.String(), want)
		}
	}
	log.Reset()
	_, _ = newSession(t, shell.Config{}, executor.Spec{ID: "run-2", Log: &log})
	if strings.Contains(log.String(), "ignores") {
		t.Errorf("setup log %q mentions ignoring something that was not set", log.String())
	}
}

func TestShell_PrepareFailsWithoutWorkspaceAndLeavesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shell")
	e := shell.New(shell.Config{Dir: dir})
	for _, spec := range []executor.Spec{
		{ID: "run-1", Workspace: filepath.Join(t.TempDir(), "missing")},
		{ID: "../escape", Workspace: t.TempDir()},
		{ID: "", Workspace: t.TempDir()},
	} {
		if _, err := e.Prepare(context.Background(), spec); err == nil {
			t.Errorf("Prepare(%+v) succeeded", spec)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("failed Prepare left %v in %s", entries, dir)
	}
}

func TestShell_DuplicateLiveIDRefused(t *testing.T) {
	e, _ := newSession(t, shell.Config{}, executor.Spec{ID: "run-7"})
	if _, err := e.Prepare(context.Background(), executor.Spec{ID: "run-7", Workspace: t.TempDir()}); err == nil {
		t.Errorf("a second live session with the same ID was prepared")
	}
}

// The script lives in a private 0700 file inside the 0700 session directory
// while the step runs, and is gone afterwards.
func TestShell_ScriptFileIsPrivateAndRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shell")
	_, s := newSession(t, shell.Config{Dir: dir}, executor.Spec{ID: "run-3"})
	sessDir := filepath.Join(dir, "run-3")
	fi, err := os.Stat(sessDir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("session directory mode %v, want 0700", fi.Mode().Perm())
	}
	res, out := exec(t, s, executor.Step{Script: "ls -l \"$0\" | cut -c1-10\necho \"$0\"\n"})
	if res.ExitCode != 0 {
		t.Fatalf("result %+v, output %q", res, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "-rwx------" || !strings.HasPrefix(lines[1], sessDir+"/") {
		t.Errorf("script file: %q, want a -rwx------ file in %s", out, sessDir)
	}
	if _, err := os.Stat(lines[len(lines)-1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("script file still there after the step: %v", err)
	}
	if err := s.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sessDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("session directory still there after Cleanup: %v", err)
	}
}

func TestShell_HomeAndPathDefaults(t *testing.T) {
	_, s := newSession(t, shell.Config{PATH: "/usr/bin:/bin"}, executor.Spec{})
	_, out := exec(t, s, executor.Step{Script: "echo \"$PATH|$HOME\"\n"})
	path, home, _ := strings.Cut(strings.TrimSuffix(out, "\n"), "|")
	if path != "/usr/bin:/bin" || filepath.Base(home) != "home" {
		t.Errorf("got %q, want Config.PATH and a HOME the executor made", out)
	} else if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
		t.Errorf("HOME %s: %v", home, err)
	}
	_, out = exec(t, s, executor.Step{Script: "echo \"$PATH|$HOME\"\n", Env: map[string]string{"PATH": "/bin", "HOME": "/nowhere"}})
	if want := "/bin|/nowhere\n"; out != want {
		t.Errorf("got %q, want %q (Step.Env wins)", out, want)
	}
}

func TestShell_ShellLookedUpInStepPATH(t *testing.T) {
	bin := t.TempDir()
	fake := "#!/bin/sh\necho \"fake shell ran $#\"\n"
	if err := os.WriteFile(filepath.Join(bin, "fakesh"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	_, s := newSession(t, shell.Config{}, executor.Spec{})
	res, out := exec(t, s, executor.Step{Shell: []string{"fakesh", "-x"}, Script: "echo no\n", Env: map[string]string{"PATH": bin + ":/usr/bin:/bin"}})
	if res.ExitCode != 0 || out != "fake shell ran 2\n" {
		t.Errorf("result %+v, output %q; want fakesh from the step's PATH with 2 arguments", res, out)
	}
	var buf bytes.Buffer
	if _, err := s.Exec(context.Background(), executor.Step{Shell: []string{"fakesh"}, Script: "true\n"}, &buf); err == nil {
		t.Errorf("a shell missing from the step's PATH was found (in the runner's?)")
	}
}

func TestShell_UnpassableVariablesRefused(t *testing.T) {
	_, s := newSession(t, shell.Config{}, executor.Spec{})
	for _, step := range []executor.Step{
		{Script: "true\n", Env: map[string]string{"A=B": "x"}},
		{Script: "true\n", Env: map[string]string{"": "x"}},
		{Script: "true\n", Secrets: map[string]string{"TOKEN": "hunter2\x00hunter2"}},
	} {
		res, err := s.Exec(context.Background(), step, nil)
		if err == nil {
			t.Errorf("Exec(%v) ran (%+v)", step.Env, res)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the secret's value: %v", err)
		}
	}
}

func TestShell_CopyCannotLeaveWorkspace(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "escape")); err != nil {
		t.Fatal(err)
	}
	_, s := newSession(t, shell.Config{}, executor.Spec{Workspace: ws})
	ctx := context.Background()
	host := filepath.Join(t.TempDir(), "x")
	for _, src := range []string{"../x", "escape/secret.txt"} {
		if err := s.CopyOut(ctx, src, host); err == nil {
			t.Errorf("CopyOut(%q) left the workspace", src)
		}
	}
	if err := os.WriteFile(host, []byte("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyIn(ctx, host, "escape/planted.txt"); err == nil {
		t.Errorf("CopyIn through a symlink left the workspace")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted.txt")); err == nil {
		t.Errorf("CopyIn wrote outside the workspace")
	}
}

func TestShell_SweepRemovesOnlyUnkeptSessions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shell")
	e, live := newSession(t, shell.Config{Dir: dir}, executor.Spec{ID: "run-live"})
	for _, id := range []string{"run-keep", "run-stale"} {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Sweep(context.Background(), []string{"run-keep"}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"run-keep": true, "run-stale": false, live.ID(): true} {
		_, err := os.Stat(filepath.Join(dir, id))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v after Sweep, want %v", id, got, want)
		}
	}
	if err := shell.New(shell.Config{Dir: filepath.Join(t.TempDir(), "none")}).Sweep(context.Background(), nil); err != nil {
		t.Errorf("Sweep of a missing directory: %v", err)
	}
}

func TestShell_RecoverOfMissingSessionIsNotRecoverable(t *testing.T) {
	e := shell.New(shell.Config{Dir: t.TempDir()})
	if _, err := e.Recover(context.Background(), executor.Handle{Executor: "shell", ID: "run-1"}); !errors.Is(err, executor.ErrNotRecoverable) {
		t.Errorf("Recover: %v, want ErrNotRecoverable", err)
	}
	if e.Name() != "shell" {
		t.Errorf("Name() = %q", e.Name())
	}
}

// cutConn is a connection a test proxy cuts after a random number of bytes
// in either direction: mid-frame, as a load balancer or a broken exec does.
type cutConn struct {
	net.Conn
	mu     sync.Mutex
	budget int
	cuts   *atomic.Int64
}

func (c *cutConn) spend(n int) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budget <= 0 {
		return 0, false
	}
	return min(n, c.budget), true
}

func (c *cutConn) used(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budget -= n
	if c.budget <= 0 {
		c.cuts.Add(1)
		_ = c.Conn.Close()
	}
}

func (c *cutConn) Read(p []byte) (int, error) {
	k, ok := c.spend(len(p))
	if !ok {
		return 0, io.ErrClosedPipe
	}
	n, err := c.Conn.Read(p[:k])
	c.used(n)
	return n, err
}

func (c *cutConn) Write(p []byte) (int, error) {
	k, ok := c.spend(len(p))
	if !ok {
		return 0, io.ErrClosedPipe
	}
	n, err := c.Conn.Write(p[:k])
	c.used(n)
	if err == nil && n < len(p) {
		err = io.ErrClosedPipe
	}
	return n, err
}

// The stream to the agent is cut at random byte positions, over and over,
// while a step prints numbered lines: the step is never disturbed and every
// line arrives exactly once, in order (actions/runner-container-hooks #331,
// gitlab-runner #4119: a dropped exec stream must neither fail the step nor
// lose or repeat output).
func TestShell_StreamCutAtRandomBytesLosesAndRepeatsNothing(t *testing.T) {
	var cuts atomic.Int64
	var cutting atomic.Bool
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KNOTLESS_TEST_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("KNOTLESS_TEST_SEED=%q: %v", v, err)
		}
	}
	t.Logf("cut positions from seed %d (KNOTLESS_TEST_SEED=%d repeats them)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	var rngMu sync.Mutex
	cfg := shell.Config{
		Dial: func(ctx context.Context, socket string) (io.ReadWriteCloser, error) {
			c, err := agent.DialUnix(ctx, socket)
			if err != nil || !cutting.Load() {
				return c, err
			}
			rngMu.Lock()
			budget := 1 + rng.IntN(4000)
			rngMu.Unlock()
			return &cutConn{Conn: c, budget: budget, cuts: &cuts}, nil
		},
	}
	cutting.Store(true) // from the first connection on
	_, s := newSession(t, cfg, executor.Spec{})
	// 20,000 lines in 100 bursts: about 2.5 s of output, in frames of a
	// few kilobytes, while the stream is cut every 2 KB on average.
	const lines = 20000
	cuts.Store(0)
	res, out := exec(t, s, executor.Step{ID: "1", Script: fmt.Sprintf(
		"i=1\nwhile [ $i -le %d ]; do echo \"line $i\"; i=$((i+1)); [ $((i %% 200)) -eq 0 ] && sleep 0.02; done\ntrue\n", lines)})
	cutting.Store(false)
	if res.ExitCode != 0 || res.Reason != "" {
		t.Fatalf("result %+v after %d cuts", res, cuts.Load())
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if out != want.String() {
		got := strings.Split(out, "\n")
		t.Fatalf("after %d cuts the output has %d lines (%d bytes), want %d lines: every line exactly once, in order", cuts.Load(), len(got)-1, len(out), lines)
	}
	if n := cuts.Load(); n < 100 {
		t.Errorf("only %d cuts happened; the test wants at least 100 during the step", n)
	} else {
		t.Logf("%d cuts, %d lines intact", n, lines)
	}
}

// The agent killed mid-step (the OOM killer's doing): Exec ends the step
// errored by its environment (reason executor, saying the agent is gone),
// and Cleanup still kills every process the step
// started, also those that left its process group, from the step's cgroup
// the agent recorded. Found by trying it: the escaped processes lived on
// as orphans of init.
func TestShell_AgentKilledMidStepLeavesNoStepProcessAfterCleanup(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shell")
	var log bytes.Buffer
	_, s := newSession(t, shell.Config{Dir: dir}, executor.Spec{ID: "run-9", Log: &log})
	if !strings.Contains(log.String(), "cgroup v2") {
		testenv.Skipf(t, "steps get no cgroup here (%q): without one, processes that left the step's group cannot be found once the agent is dead", log.String())
	}
	var out syncbuf.Buffer
	type ended struct {
		res executor.Result
		err error
	}
	done := make(chan ended, 1)
	go func() {
		res, err := s.Exec(context.Background(), executor.Step{ID: "1", Script: "setsid sleep 600 &\necho \"esc $!\"\nsleep 600\n"}, &out)
		done <- ended{res, err}
	}()
	var esc int
	deadline := time.Now().Add(30 * time.Second)
	for esc == 0 {
		if rest, ok := strings.CutPrefix(out.String(), "esc "); ok && strings.HasSuffix(rest, "\n") {
			esc, _ = strconv.Atoi(strings.TrimSpace(rest))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no esc line: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { _ = syscall.Kill(esc, syscall.SIGKILL) })
	b, err := os.ReadFile(filepath.Join(dir, "run-9", "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ PID int }
	if err := json.Unmarshal(b, &st); err != nil || st.PID <= 1 {
		t.Fatalf("agent.json %s: %v", b, err)
	}
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-done:
		if e.err != nil || !executor.EnvironmentFault(e.res.Reason) || !strings.Contains(e.res.Note, "agent") {
			t.Fatalf("Exec after its agent was killed: %+v, %v; want an environment fault naming the agent", e.res, e.err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("Exec did not return after its agent was killed")
	}
	if !alive(esc) {
		t.Fatalf("the escaped process %d died with the agent: the test proves nothing", esc)
	}
	if err := s.Cleanup(context.Background()); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for alive(esc) {
		if time.Now().After(deadline) {
			t.Fatalf("the step's escaped process %d outlived its dead agent's Cleanup", esc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestShell_RefusesAServicesRunNamingTheServices: the shell executor runs
// no images, so a run with services fails at once (reason service) naming
// them and what runs them, and leaves nothing behind.
func TestShell_RefusesAServicesRunNamingTheServices(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shell")
	e := shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t)}, Dir: dir})
	_, err := e.Prepare(context.Background(), executor.Spec{ID: "run-1", Workspace: t.TempDir(),
		Services: []executor.Service{{Name: "db", Image: "postgres:16"}, {Name: "cache", Image: "redis:7"}}})
	var f *executor.Fault
	if !errors.As(err, &f) || f.Reason != api.ReasonService || !strings.Contains(f.Message, "db, cache") || !strings.Contains(f.Message, "docker or kube") {
		t.Fatalf("Prepare: %v, want a service fault naming db, cache and the executors that run them", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused Prepare left %d entries in %s", len(entries), dir)
	}
}
