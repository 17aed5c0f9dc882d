package runnercli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/runner"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

// The test binary doubles as knotless-run: with KNOTLESS_RUN_AS_MAIN=1 it
// runs Main, so process-level tests need no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("KNOTLESS_RUN_AS_MAIN") == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	agentBin, err := agenttest.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "build knotless-agent:", err)
		os.Exit(1)
	}
	os.Setenv("KNOTLESS_AGENT", agentBin)
	os.Exit(m.Run())
}

// command returns knotless-run as a process with env added to a clean
// environment.
func command(dir string, env []string, args ...string) (*exec.Cmd, *syncbuf.Buffer, *syncbuf.Buffer) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"KNOTLESS_RUN_AS_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KNOTLESS_AGENT=" + os.Getenv("KNOTLESS_AGENT")}, env...)
	var out, errb syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("run: %v", err)
	return -1
}

// checkout makes a git work tree holding the workflow file ci.yml.
func checkout(t *testing.T, workflowYAML string) string {
	t.Helper()
	return servertest.WorkTree(t, map[string]string{".knotless/workflows/ci.yml": workflowYAML})
}

func TestHelp_EveryCommandExplainsItself(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"login", "--help"}, {"run", "--help"}, {"exec", "--help"}} {
		cmd, out, _ := command(t.TempDir(), nil, args...)
		if code := exitCode(t, cmd.Run()); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		if !strings.Contains(out.String(), "Usage:") {
			t.Fatalf("%v printed:\n%s", args, out.String())
		}
	}
	cmd, out, _ := command(t.TempDir(), nil, "run", "--help")
	cmd.Run()
	for _, want := range []string{"KNOTLESS_STATE", "KNOTLESS_WORK", "KNOTLESS_CAPACITY", "KNOTLESS_STOP_WAIT", "KNOTLESS_LOG_LIMIT", "KNOTLESS_EXECUTOR", "DIR/spool",
		"--cache-size", "KNOTLESS_CACHE_SIZE", "DIR/caches/", "--cache-store", "KNOTLESS_CACHE_STORE", "--cache-store-region",
		"AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "~/.aws/credentials", "--cache-unused-days", "KNOTLESS_CACHE_UNUSED_DAYS", "--cache-store-direct", "KNOTLESS_CACHE_STORE_DIRECT",
		"(default 7)", "--cache-repo-size", "KNOTLESS_CACHE_REPO_SIZE"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run --help does not mention %s", want)
		}
	}
}

func TestUsageErrors_ExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"run", "--nope"},
		{"run"},
		{"login", "--server", "http://x"},
		{"exec"},
		{"exec", "a.yml", "b.yml"},
		{"exec", "missing.yml"},
		{"run", "--state", "s", "--work", "w", "--executor", "nope"},
		{"run", "--state", "s", "--work", "w", "--cache-size", "10GB"},
		{"run", "--state", "s", "--work", "w", "--cache-store", "ftp://x/b"},
		{"run", "--state", "s", "--work", "w", "--cache-store", "https://AKIA:secret@s3.example.com/b"},
		{"run", "--state", "s", "--work", "w", "--cache-store", "https://s3.example.com/"},
		{"run", "--state", "s", "--work", "w", "--cache-unused-days", "-1"},
		{"run", "--state", "s", "--work", "w", "--cache-store-direct"},
		{"run", "--state", "s", "--work", "w", "--cache-repo-size", "lots"},
	} {
		cmd, _, errb := command(t.TempDir(), nil, args...)
		if code := exitCode(t, cmd.Run()); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

func TestExec_ExitCodesAndFramedMaskedOutput(t *testing.T) {
	dir := checkout(t, `on: {push: {}}
secrets: [TOKEN]
steps:
  - name: hello
    secrets: [TOKEN]
    run: |
      echo "hello from $KNOTLESS_WORKFLOW in $(pwd)"
      echo "token $TOKEN"
  - name: fail
    run: exit 4
`)
	wf := filepath.Join(dir, ".knotless", "workflows", "ci.yml")
	cmd, out, errb := command(dir, []string{"TOKEN=very-secret-value"}, "exec", wf, "--secret", "TOKEN")
	if code := exitCode(t, cmd.Run()); code != 1 {
		t.Fatalf("failing run: exit %d, want 1\n%s\n%s", code, out.String(), errb.String())
	}
	got := out.String()
	for _, want := range []string{
		// Footers without durations, as `knotless run logs` prints them.
		"── step 1/2: hello ──\nhello from ci in " + dir + "\ntoken ***\n── succeeded, exit 0 ──\n",
		"── step 2/2: fail ──\n── failed, exit 4 ──\n",
		"run 0 (ci): failed, exit-code, exit 4",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got+errb.String(), "very-secret-value") {
		t.Fatal("secret printed")
	}

	// A missing secret value: error before running.
	cmd, out, _ = command(dir, nil, "exec", wf, "--secret", "TOKEN")
	if code := exitCode(t, cmd.Run()); code != 2 || strings.Contains(out.String(), "hello") {
		t.Fatalf("missing secret: exit %d, output %q", code, out.String())
	}

	ok := checkout(t, "on: {push: {}}\nsteps:\n  - run: echo fine\n")
	cmd, out, _ = command(ok, nil, "exec", ".knotless/workflows/ci.yml")
	if code := exitCode(t, cmd.Run()); code != 0 || !strings.Contains(out.String(), "run 0 (ci): succeeded") {
		t.Fatalf("succeeding run: exit %d\n%s", code, out.String())
	}
}

// TestExec_InvalidWorkflowSaysErroredInFooterAndSummary pins a setup footer
// "failed, workflow-invalid" under an "errored" summary, and advice to
// "push again" where nothing is pushed.
func TestExec_InvalidWorkflowSaysErroredInFooterAndSummary(t *testing.T) {
	dir := checkout(t, "on: {push: {}}\nstpes:\n  - run: echo hi\n")
	cmd, out, errb := command(dir, nil, "exec", ".knotless/workflows/ci.yml")
	if code := exitCode(t, cmd.Run()); code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out.String(), errb.String())
	}
	got := out.String()
	for _, want := range []string{
		".knotless/workflows/ci.yml:2:1: unknown key \"stpes\"",
		"── errored, workflow-invalid ──\n",
		"run 0 (ci): errored, workflow-invalid: ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "push") {
		t.Errorf("exec output speaks of pushing:\n%s", got)
	}
}

func TestUsageErrors_UnknownCommandIsOneLineWithSuggestion(t *testing.T) {
	cmd, _, errb := command(t.TempDir(), nil, "rn")
	if code := exitCode(t, cmd.Run()); code != 2 {
		t.Fatalf("exit %d", code)
	}
	if got := errb.String(); got != "knotless-run: unknown command \"rn\" for \"knotless-run\"; did you mean run? (see knotless-run --help)\n" {
		t.Errorf("stderr %q", got)
	}
}

func TestHelp_EverySubcommandHasExamples(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"login", "--help"}, {"run", "--help"}, {"exec", "--help"}} {
		cmd, out, _ := command(t.TempDir(), nil, args...)
		cmd.Run()
		if !strings.Contains(out.String(), "Examples:\n  knotless-run ") {
			t.Errorf("%v has no examples:\n%s", args, out.String())
		}
	}
}

// TestLogin_ServerWithoutSchemeSaysWhatToWrite pins a raw Go URL parse
// error for --server 127.0.0.1:18480.
func TestLogin_ServerWithoutSchemeSaysWhatToWrite(t *testing.T) {
	const want = "knotless-run: server URL must start with http:// or https:// — did you mean http://127.0.0.1:18480?"
	tmp := t.TempDir()
	state := filepath.Join(tmp, "state.json")
	cmd, _, errb := command(tmp, nil, "login", "--server", "127.0.0.1:18480", "--repo", "a/b", "--name", "r", "--state", state)
	if code := exitCode(t, cmd.Run()); code != 2 || strings.TrimSpace(errb.String()) != want {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	cmd, _, errb = command(tmp, []string{"KNOTLESS_SERVER=127.0.0.1:18480"}, "login", "--repo", "a/b", "--name", "r", "--state", state)
	if code := exitCode(t, cmd.Run()); code != 2 || !strings.HasPrefix(errb.String(), want) || !strings.Contains(errb.String(), "KNOTLESS_SERVER") {
		t.Errorf("from KNOTLESS_SERVER: exit %d, stderr %q", code, errb.String())
	}
	if _, err := os.Stat(state); err == nil {
		t.Error("a state file was written")
	}
}

// TestRun_SIGTERMWithoutHandoverCancelsRunsAfterStopWaitAndExitsZero
// drives the real program: login, approval, a push, a run in progress,
// SIGTERM with --handover=false (KNOTLESS_HANDOVER=false).
func TestRun_SIGTERMWithoutHandoverCancelsRunsAfterStopWaitAndExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and the runner as a process")
	}
	srv := servertest.Start(t, servertest.Options{})
	tok := srv.CreateAccount(t, "alice")
	srv.CreateRepo(t, tok, "app")
	tmp := t.TempDir()
	state := filepath.Join(tmp, "state.json")

	// alice, the owner, makes a one-use registration token; login reads it
	// from the environment.
	var reg api.RegistrationToken
	if err := srv.Client(tok).Procedure(context.Background(), api.MethodCreateRegistrationToken,
		api.CreateRegistrationTokenInput{Repo: "alice/app"}, &reg); err != nil {
		t.Fatal(err)
	}
	regEnv := []string{"KNOTLESS_REGISTRATION_TOKEN=" + reg.Token}
	cmd, out, errb := command(tmp, regEnv, "login", "--server", srv.URL, "--repo", "alice/app", "--name", "r1", "--labels", "linux", "--state", state)
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("login: exit %d\n%s", code, errb.String())
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", fi.Mode(), err)
	}
	st, err := runner.LoadState(state)
	if err != nil {
		t.Fatal(err)
	}
	// The approve command names the DID, so only this registration passes.
	approveCmd := "knotless runner approve r1 --repo alice/app --did " + st.DID + "\n"
	if !strings.Contains(out.String(), approveCmd) {
		t.Fatalf("login output lacks %q:\n%s", approveCmd, out.String())
	}
	cmd, _, _ = command(tmp, regEnv, "login", "--server", srv.URL, "--repo", "alice/app", "--name", "r2", "--state", state)
	if code := exitCode(t, cmd.Run()); code != 1 {
		t.Fatalf("login over an existing state file: exit %d, want 1", code)
	}
	if err := srv.Client(tok).Procedure(context.Background(), api.MethodApproveRunner, api.RunnerRef{Repo: "alice/app", Name: "r1", DID: st.DID}, nil); err != nil {
		t.Fatal(err)
	}

	run, logs, runErr := command(tmp, []string{"KNOTLESS_STATE=" + state, "KNOTLESS_WORK=" + filepath.Join(tmp, "work"), "KNOTLESS_STOP_WAIT=1s", "KNOTLESS_HANDOVER=false"}, "run")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() { run.Process.Kill() })

	src := checkout(t, "on: {push: {}}\nsteps:\n  - run: echo started; sleep 120\n")
	srv.PushDir(t, src, "alice/app", tok, "main")
	var id int64
	deadline := time.Now().Add(30 * time.Second)
	for id == 0 {
		var list api.ListRunsOutput
		if err := srv.Admin().Query(context.Background(), api.MethodListRuns, url.Values{"repo": {"alice/app"}}, &list); err == nil && len(list.Runs) > 0 && list.Runs[0].State == api.StateRunning {
			id = list.Runs[0].ID
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running run; runner log:\n%s%s", logs.String(), runErr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	run.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if code := exitCode(t, err); code != 0 {
			t.Fatalf("runner exit %d after SIGTERM\n%s", code, runErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("runner did not exit after SIGTERM\n%s", runErr.String())
	}
	final := srv.WaitRun(t, id, 5*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	if final.State != api.StateCancelled || final.Reason != api.ReasonRunnerStopped {
		t.Fatalf("run %+v", final)
	}
	for _, want := range []string{"claimed run", "a second signal cancels running runs at once", "stop wait is over", "runner stopped"} {
		if !strings.Contains(runErr.String(), want) {
			t.Errorf("runner log lacks %q:\n%s", want, runErr.String())
		}
	}
}

// exec killed outright (SIGKILL: no handler runs) leaves no step running:
// nobody will take its run over, so its step agent ends the step and exits
// once exec is gone. Found by trying it: the agent and the step ran on for
// the run's whole timeout.
func TestExec_KilledExecLeavesNoStepRunning(t *testing.T) {
	marker := "600." + strconv.FormatInt(time.Now().UnixNano()%1_000_000_007, 10)
	dir := checkout(t, "on: {push: {}}\nsteps:\n  - run: |\n      echo started\n      sleep "+marker+"\n")
	work := t.TempDir()
	cmd, out, errb := command(dir, nil, "exec", ".knotless/workflows/ci.yml", "--work", work)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	testwait.For(t, 30*time.Second, "the step to start", func() bool { return strings.Contains(out.String(), "started\n") })
	// The shell prints "started" before it forks sleep: under load the
	// sleep may not exist yet when the line arrives (CI failed here with
	// "no step process"), so wait for it rather than look once.
	testwait.For(t, 30*time.Second, "the step's sleep "+marker+" to run", func() bool { return len(pidsWithArg(marker)) == 1 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testwait.For(t, 15*time.Second, "the step and its agent to end after exec was killed", func() bool {
		return len(pidsWithArg(marker)) == 0 && len(pidsMentioning(work)) == 0
	})
	_ = errb
}

// --agent naming a missing program is refused at start, before anything is
// claimed. Found by trying it: the runner started and errored every run.
func TestRun_MissingAgentIsRefusedAtStart(t *testing.T) {
	tmp := t.TempDir()
	cmd, _, errb := command(tmp, nil, "run", "--state", filepath.Join(tmp, "none.json"), "--work", filepath.Join(tmp, "w"), "--agent", "/nonexistent/knotless-agent")
	if code := exitCode(t, cmd.Run()); code != 1 || !strings.Contains(errb.String(), "--agent /nonexistent/knotless-agent") {
		t.Fatalf("exit %d, stderr %q; want 1 and a message naming --agent", code, errb.String())
	}
}

// pidsMentioning lists the processes whose command line contains s.
func pidsMentioning(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pidsWithArg lists the processes with arg among their arguments.
func pidsWithArg(arg string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(b, []byte{0}) {
			if string(a) == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// Credentials never go on the command line: a --cache-store URL holding
// them is refused, saying where they go, without repeating the secret.
func TestRun_CacheStoreURLWithCredentialsIsRefusedWithoutEchoingThem(t *testing.T) {
	tmp := t.TempDir()
	cmd, _, errb := command(tmp, nil, "run", "--state", "s", "--work", "w", "--cache-store", "https://AKIA:very-secret@s3.example.com/b")
	if code := exitCode(t, cmd.Run()); code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, errb.String())
	}
	if msg := errb.String(); !strings.Contains(msg, "AWS_ACCESS_KEY_ID") || strings.Contains(msg, "very-secret") {
		t.Fatalf("stderr %q: want where credentials go, never the secret", msg)
	}
}
