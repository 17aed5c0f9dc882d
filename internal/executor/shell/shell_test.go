package shell_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent/agenttest"
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

func TestShell(t *testing.T) {
	executortest.Run(t, func(t *testing.T) (executor.Session, executortest.Env) {
		_, s := newSession(t, shell.Config{}, executor.Spec{})
		return s, executortest.Env{
			Procs:   executortest.HostProcs,
			NewGate: executortest.FifoGate(s.Workdir()),
		}
	})
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

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z'
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
