package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

// serverEnv starts a real server and returns it with an environment that
// talks to it as the admin (KNOTLESS_SERVER, KNOTLESS_TOKEN) and keeps the
// config file in a temp dir.
func serverEnv(t *testing.T) (*servertest.Server, env) {
	t.Helper()
	srv := servertest.Start(t, servertest.Options{})
	e := isolatedEnv(t)
	e[EnvServer] = srv.URL
	e[EnvToken] = srv.AdminToken
	return srv, e
}

// with returns a copy of e with more variables.
func (e env) with(kv ...string) env {
	out := env{}
	for k, v := range e {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// mustRun runs the CLI and fails the test unless it exits with want.
func mustRun(t *testing.T, e env, want int, stdin io.Reader, args ...string) result {
	t.Helper()
	r := runCLI(t, e, "", stdin, args...)
	if r.code != want {
		t.Fatalf("knotless %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

func TestLogin_ChecksTokenAndSavesPrivateConfig(t *testing.T) {
	srv, _ := serverEnv(t)
	cfgDir := t.TempDir()
	e := env{"HOME": t.TempDir(), "XDG_CONFIG_HOME": cfgDir}
	cfg := filepath.Join(cfgDir, "knotless", "config.json")

	// A wrong token is refused and nothing is saved.
	r := mustRun(t, e, ExitAuth, strings.NewReader("wrong-token\n"), "login", "--server", srv.URL)
	if !strings.Contains(r.stderr, "DATA/admin.token") || strings.Contains(r.stderr, "InvalidToken") {
		t.Errorf("stderr %q", r.stderr)
	}
	if _, err := os.Stat(cfg); err == nil {
		t.Fatal("config saved for a refused token")
	}

	// Token from stdin (not a terminal).
	r = mustRun(t, e, ExitOK, strings.NewReader(srv.AdminToken+"\n"), "login", "--server", srv.URL+"/")
	if !strings.Contains(r.stdout, "as admin") {
		t.Errorf("login output %q", r.stdout)
	}
	fi, err := os.Stat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %04o, want 0600", fi.Mode().Perm())
	}
	c, err := LoadConfig(cfg)
	if err != nil || c.Server != srv.URL || c.Token != srv.AdminToken {
		t.Errorf("saved config %+v, %v", c, err)
	}
	r = mustRun(t, e, ExitOK, nil, "whoami", "--json")
	var acct api.Account
	decodeJSON(t, r.stdout, &acct)
	if acct.Handle != "admin" || !acct.Admin {
		t.Errorf("whoami: %+v", acct)
	}

	// Token from a file, config at --config.
	tokFile := filepath.Join(t.TempDir(), "tok")
	bobTok := srv.CreateAccount(t, "bob")
	os.WriteFile(tokFile, []byte(bobTok+"\n"), 0o600)
	alt := filepath.Join(t.TempDir(), "alt.json")
	mustRun(t, e, ExitOK, nil, "login", "--server", srv.URL, "--token-file", tokFile, "--config", alt)
	r = mustRun(t, e, ExitOK, nil, "whoami", "--config", alt)
	if !strings.HasPrefix(r.stdout, "bob\n") {
		t.Errorf("whoami with --config: %q", r.stdout)
	}
	// KNOTLESS_TOKEN overrides the file.
	r = mustRun(t, e.with(EnvToken, bobTok), ExitOK, nil, "whoami")
	if !strings.HasPrefix(r.stdout, "bob\n") {
		t.Errorf("whoami with KNOTLESS_TOKEN: %q", r.stdout)
	}
}

func TestAccountCreate_PrintsTokenOnceAndItWorks(t *testing.T) {
	_, e := serverEnv(t)
	r := mustRun(t, e, ExitOK, nil, "account", "create", "carol", "--json")
	var out api.CreateAccountOutput
	decodeJSON(t, r.stdout, &out)
	if out.Account.Handle != "carol" || out.Token == "" || out.Account.Admin {
		t.Fatalf("account create: %+v", out)
	}
	carol := e.with(EnvToken, out.Token)
	r = mustRun(t, carol, ExitOK, nil, "whoami")
	if !strings.HasPrefix(r.stdout, "carol\n") {
		t.Errorf("whoami as carol: %q", r.stdout)
	}
	// Not an admin: creating accounts is forbidden (exit 4).
	// The server's message is printed once, without the XRPC error name and
	// without a hint about repository owners (accounts have none).
	r = mustRun(t, carol, ExitAuth, nil, "account", "create", "dave")
	if !strings.Contains(r.stderr, "admin") || strings.Contains(r.stderr, "Forbidden") ||
		strings.Contains(r.stderr, "repository owner") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr %q", r.stderr)
	}
	// Human output shows the token once and how to log in.
	r = mustRun(t, e, ExitOK, nil, "account", "create", "erin")
	if !strings.Contains(r.stdout, "shown only this once") || !strings.Contains(r.stdout, "knotless login --server") {
		t.Errorf("account create output:\n%s", r.stdout)
	}
}

func TestRepo_CreateAndList(t *testing.T) {
	srv, e := serverEnv(t)
	r := mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	wantURL := srv.URL + "/admin/app.git"
	if !strings.Contains(r.stdout, "Clone URL: "+wantURL) || !strings.Contains(r.stdout, "git push knotless") {
		t.Errorf("repo create output:\n%s", r.stdout)
	}
	mustRun(t, e, ExitOK, nil, "repo", "create", "admin/lib")

	r = mustRun(t, e, ExitOK, nil, "repo", "list", "--json")
	var out api.ListReposOutput
	decodeJSON(t, r.stdout, &out)
	var names []string
	for _, rp := range out.Repos {
		names = append(names, rp.FullName())
	}
	if strings.Join(names, ",") != "admin/app,admin/lib" && strings.Join(names, ",") != "admin/lib,admin/app" {
		t.Errorf("repo list: %v", names)
	}
	r = mustRun(t, e, ExitOK, nil, "repo", "list")
	if !strings.Contains(r.stdout, "REPO") || !strings.Contains(r.stdout, "admin/lib") || !strings.Contains(r.stdout, wantURL) {
		t.Errorf("repo list table:\n%s", r.stdout)
	}
	// The same name twice is a conflict: the thing failed.
	r = mustRun(t, e, ExitFailed, nil, "repo", "create", "app")
	if strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr is not one line: %q", r.stderr)
	}
}

func TestSecret_SetFromStdinListShowsNoValueRemove(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	srv.RegisterRunner(t, "admin/app", "build-1", nil, true)
	const value = "s3cr3t-V4lue-that-must-not-show"
	r := mustRun(t, e, ExitOK, strings.NewReader(value+"\n"), "secret", "set", "DEPLOY_KEY", "--repo", "admin/app")
	if strings.Contains(r.stdout+r.stderr, value) {
		t.Fatalf("secret set printed the value: %q %q", r.stdout, r.stderr)
	}
	// KNOTLESS_REPO and a bare NAME (owner = the caller) work too.
	r = mustRun(t, e.with(EnvRepo, "app"), ExitOK, strings.NewReader(value), "secret", "set", "DEPLOY_KEY", "--runner", "build-1", "--json")
	var set api.Secret
	decodeJSON(t, r.stdout, &set)
	if set.Name != "DEPLOY_KEY" || set.Runner != "build-1" || set.UpdatedAt.IsZero() || strings.Contains(r.stdout, value) {
		t.Errorf("secret set --json: %s", r.stdout)
	}

	r = mustRun(t, e, ExitOK, nil, "secret", "list", "--repo", "admin/app", "--json")
	if strings.Contains(r.stdout, value) {
		t.Fatalf("secret list shows the value: %s", r.stdout)
	}
	var out api.ListSecretsOutput
	decodeJSON(t, r.stdout, &out)
	if len(out.Secrets) != 2 {
		t.Fatalf("secret list: %+v", out.Secrets)
	}
	r = mustRun(t, e, ExitOK, nil, "secret", "list", "--repo", "admin/app")
	if strings.Contains(r.stdout, value) || !strings.Contains(r.stdout, "DEPLOY_KEY") || !strings.Contains(r.stdout, "build-1") {
		t.Errorf("secret list table:\n%s", r.stdout)
	}

	if strings.Contains(r.stderr, "warning") {
		t.Errorf("a long value was warned about: %q", r.stderr)
	}
	// A value under 4 bytes is set, with a warning that logs show it.
	r = mustRun(t, e, ExitOK, strings.NewReader("abc"), "secret", "set", "SHORT", "--repo", "admin/app")
	if !strings.Contains(r.stderr, "shorter than 4 bytes") || !strings.Contains(r.stderr, "cannot mask it") || strings.Contains(r.stderr, "abc") {
		t.Errorf("short value: stderr %q", r.stderr)
	}
	mustRun(t, e, ExitOK, nil, "secret", "rm", "SHORT", "--repo", "admin/app")

	// Empty value: refused before anything is sent.
	mustRun(t, e, ExitFailed, strings.NewReader("\n"), "secret", "set", "EMPTY", "--repo", "admin/app")
	// No repository: usage error.
	mustRun(t, e, ExitUsage, strings.NewReader("v"), "secret", "set", "X")

	mustRun(t, e, ExitOK, nil, "secret", "rm", "DEPLOY_KEY", "--repo", "admin/app", "--runner", "build-1")
	mustRun(t, e, ExitOK, nil, "secret", "rm", "DEPLOY_KEY", "--repo", "admin/app")
	r = mustRun(t, e, ExitOK, nil, "secret", "list", "--repo", "admin/app", "--json")
	decodeJSON(t, r.stdout, &out)
	if len(out.Secrets) != 0 {
		t.Errorf("secrets left after rm: %+v", out.Secrets)
	}
	mustRun(t, e, ExitNotFound, nil, "secret", "rm", "DEPLOY_KEY", "--repo", "admin/app")
}

func TestRunner_ListApproveRemove(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	r := mustRun(t, e, ExitOK, nil, "runner", "list", "--repo", "admin/app")
	if !strings.Contains(r.stdout, "No runners") {
		t.Errorf("empty runner list: %q", r.stdout)
	}
	rn := srv.RegisterRunner(t, "admin/app", "build-1", []string{"linux", "fast"}, false)

	r = mustRun(t, e, ExitOK, nil, "runner", "list", "--repo", "admin/app")
	if !strings.Contains(r.stdout, "build-1") || !strings.Contains(r.stdout, "pending") || !strings.Contains(r.stdout, "linux") || !strings.Contains(r.stdout, "fast") {
		t.Errorf("runner list:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, shortDID(rn.DID)) {
		t.Errorf("runner list does not show the (short) DID %s:\n%s", shortDID(rn.DID), r.stdout)
	}
	// --did: a registration with another DID is not approved.
	other := srv.RegisterRunner(t, "admin/app", "build-2", nil, false)
	r = mustRun(t, e, ExitFailed, nil, "runner", "approve", "build-1", "--repo", "admin/app", "--did", other.DID)
	if !strings.Contains(r.stderr, rn.DID) || strings.Contains(r.stderr, "Conflict:") {
		t.Errorf("approve with another DID: stderr %q", r.stderr)
	}
	mustRun(t, e, ExitUsage, nil, "runner", "approve", "build-1", "--repo", "admin/app", "--did", "zDnae")
	r = mustRun(t, e, ExitOK, nil, "runner", "approve", "build-1", "--repo", "admin/app", "--did", rn.DID)
	if !strings.Contains(r.stdout, rn.DID) {
		t.Errorf("approve does not show the DID to check: %q", r.stdout)
	}
	mustRun(t, e, ExitOK, nil, "runner", "remove", "build-2", "--repo", "admin/app")
	r = mustRun(t, e, ExitOK, nil, "runner", "list", "--repo", "admin/app", "--json")
	var out api.ListRunnersOutput
	decodeJSON(t, r.stdout, &out)
	if len(out.Runners) != 1 || out.Runners[0].Status != api.RunnerApproved || out.Runners[0].DID != rn.DID {
		t.Fatalf("runner list after approve: %+v", out.Runners)
	}
	mustRun(t, e, ExitNotFound, nil, "runner", "approve", "nope", "--repo", "admin/app")
	mustRun(t, e, ExitOK, nil, "runner", "remove", "build-1", "--repo", "admin/app")
	r = mustRun(t, e, ExitOK, nil, "runner", "list", "--repo", "admin/app", "--json")
	decodeJSON(t, r.stdout, &out)
	if len(out.Runners) != 0 {
		t.Errorf("runner left after remove: %+v", out.Runners)
	}
}

func TestExitCodes_AgainstServer(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	// Not found: 5.
	r := mustRun(t, e, ExitNotFound, nil, "run", "show", "99999")
	if !strings.Contains(r.stderr, "99999") {
		t.Errorf("not found message %q", r.stderr)
	}
	mustRun(t, e, ExitNotFound, nil, "secret", "list", "--repo", "admin/nope")
	mustRun(t, e, ExitNotFound, nil, "run", "logs", "99999")
	// Bad token: 4, and says to log in again.
	r = mustRun(t, e.with(EnvToken, "not-a-token"), ExitAuth, nil, "repo", "list")
	if !strings.Contains(r.stderr, "knotless login") {
		t.Errorf("bad token message %q", r.stderr)
	}
	// Someone else's repository: 4 (or 5 if the server hides it).
	other := srv.CreateAccount(t, "mallory")
	r = runCLI(t, e.with(EnvToken, other), "", nil, "secret", "list", "--repo", "admin/app")
	if r.code != ExitAuth && r.code != ExitNotFound {
		t.Errorf("another's repository: exit %d, stderr %q", r.code, r.stderr)
	}
	// Server gone: 3.
	srv.Stop()
	r = mustRun(t, e, ExitUnavailable, nil, "repo", "list")
	if !strings.Contains(r.stderr, "cannot reach the server at "+srv.URL) {
		t.Errorf("server down message %q", r.stderr)
	}
}

// workflowTwoSteps is a workflow with two steps: the protocol runner below
// plays them.
const workflowTwoSteps = `name: ci
on:
  push: {}
steps:
  - name: build
    run: echo hello
  - name: test
    run: exit 3
`

// playRun acts as a runner over the real protocol: it claims one run and
// reports a setup log, then steps as given by script, then completes. hook,
// when set, runs after step 1's first bytes are shipped and before step 1
// ends (tests wait there for the CLI to show them).
type stepScript struct {
	name  string
	log   string
	state string
	exit  int
}

func playRun(t *testing.T, rn *servertest.Runner, setup string, steps []stepScript, final string, exit int, hook func()) api.Run {
	t.Helper()
	ctx := context.Background()
	var claimed api.ClaimOutput
	deadline := time.Now().Add(20 * time.Second)
	for claimed.Run == nil {
		if time.Now().After(deadline) {
			t.Fatal("no run to claim")
		}
		if err := rn.Client.Procedure(ctx, api.MethodClaim, api.ClaimInput{Wait: 5}, &claimed); err != nil {
			t.Fatalf("claim: %v", err)
		}
	}
	run := claimed.Run.Run
	call := func(nsid string, in any) {
		t.Helper()
		if err := rn.Client.Procedure(ctx, nsid, in, nil); err != nil {
			t.Fatalf("%s: %v", nsid, err)
		}
	}
	appendLog := func(step int, offset int64, data string) {
		t.Helper()
		p := url.Values{"run": {fmt.Sprint(run.ID)}, "step": {fmt.Sprint(step)}, "offset": {fmt.Sprint(offset)}}
		resp, err := rn.Client.Do(ctx, "POST", api.MethodAppendLog, p, "application/octet-stream", strings.NewReader(data))
		if err != nil {
			t.Fatalf("appendLog: %v", err)
		}
		resp.Body.Close()
	}
	for i, st := range steps {
		call(api.MethodUpdateStep, api.UpdateStepInput{Run: run.ID, Step: i + 1, Name: st.name, State: api.StepPending})
	}
	appendLog(api.SetupStep, 0, setup)
	// Each step runs 1.5 s by the runner's clock (At), an hour ago: the
	// footers and run show print that, not the test's own timing.
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i, st := range steps {
		began, ended := base.Add(time.Duration(i)*2*time.Second), base.Add(time.Duration(i)*2*time.Second+1500*time.Millisecond)
		call(api.MethodUpdateStep, api.UpdateStepInput{Run: run.ID, Step: i + 1, Name: st.name, State: api.StepRunning, At: &began})
		half := len(st.log) / 2
		appendLog(i+1, 0, st.log[:half])
		if i == 0 && hook != nil {
			hook()
		}
		appendLog(i+1, int64(half), st.log[half:])
		code := st.exit
		reason := ""
		if st.state == api.StepFailed {
			reason = api.ReasonExitCode
		}
		call(api.MethodUpdateStep, api.UpdateStepInput{Run: run.ID, Step: i + 1, Name: st.name, State: st.state, ExitCode: &code, Reason: reason, At: &ended})
	}
	in := api.CompleteInput{Run: run.ID, State: final, ExitCode: &exit}
	if final != api.StateSucceeded {
		in.Reason = api.ReasonExitCode
	}
	call(api.MethodComplete, in)
	return run
}

func TestRunLogsFollow_StreamsAPushedRunToTheEndAndExits1OnFailure(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	rn := srv.RegisterRunner(t, "admin/app", "build-1", nil, true)

	// Follow first: it waits for the pipeline the push makes.
	out := &syncbuf.Buffer{}
	var errb bytes.Buffer
	codec := make(chan int, 1)
	go func() {
		a := &App{Stdin: strings.NewReader(""), Stdout: out, Stderr: &errb, Getenv: e.get}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		codec <- a.Run(ctx, []string{"run", "logs", "--repo", "admin/app", "--latest", "-f", "--timeout", "30s"})
	}()

	sha := srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": workflowTwoSteps}, "refs/heads/main")
	steps := []stepScript{
		{name: "build", log: "hello from build\nsecond line\n", state: api.StepSucceeded, exit: 0},
		{name: "test", log: "no newline at the end", state: api.StepFailed, exit: 3},
	}
	run := playRun(t, rn, "checked out "+sha[:7]+"\n", steps, api.StateFailed, 3, func() {
		// The CLI shows step 1's first half while the step still runs.
		testwait.For(t, 20*time.Second, "the first half of step 1 on the CLI's stdout", func() bool {
			return strings.Contains(out.String(), "hello from bu")
		})
	})

	var code int
	select {
	case code = <-codec:
	case <-time.After(time.Minute):
		t.Fatal("run logs -f did not end after the run finished")
	}
	got := out.String()
	if code != ExitFailed {
		t.Errorf("exit %d, want 1 for a failed run; stderr %q", code, errb.String())
	}
	want := "── setup ──\n" +
		"checked out " + sha[:7] + "\n" +
		"── done ──\n" +
		"── step 1/2: build ──\n" +
		"hello from build\nsecond line\n" +
		"── succeeded, exit 0, 1.5s ──\n" +
		"── step 2/2: test ──\n" +
		"no newline at the end\n" +
		"── failed, exit 3, 1.5s ──\n" +
		fmt.Sprintf("run %d (ci): failed, exit-code, exit 3\n", run.ID)
	if got != want {
		t.Errorf("followed logs:\n%s\nwant:\n%s", got, want)
	}

	// The same run printed afterwards looks the same.
	r := mustRun(t, e, ExitOK, nil, "run", "logs", fmt.Sprint(run.ID))
	if r.stdout != want {
		t.Errorf("run logs after the end:\n%s\nwant:\n%s", r.stdout, want)
	}
	// -f on a finished run prints the same and exits 1 (failed).
	r = mustRun(t, e, ExitFailed, nil, "run", "logs", fmt.Sprint(run.ID), "-f")
	if r.stdout != want {
		t.Errorf("run logs -f after the end:\n%s\nwant:\n%s", r.stdout, want)
	}
	oneStepLogs(t, e, run.ID)

	// run list and run show, as tables and as JSON.
	r = mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app", "--json")
	var list api.ListRunsOutput
	decodeJSON(t, r.stdout, &list)
	if len(list.Runs) != 1 || list.Runs[0].ID != run.ID || list.Runs[0].SHA != sha || list.Runs[0].State != api.StateFailed {
		t.Errorf("run list --json: %+v", list.Runs)
	}
	r = mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app", "--pipeline", "latest")
	if !strings.Contains(r.stdout, sha[:7]) || !strings.Contains(r.stdout, "failed (exit-code)") || !strings.Contains(r.stdout, "main") {
		t.Errorf("run list table:\n%s", r.stdout)
	}
	r = mustRun(t, e, ExitOK, nil, "run", "show", fmt.Sprint(run.ID), "--json")
	var shown api.Run
	decodeJSON(t, r.stdout, &shown)
	if shown.ID != run.ID || len(shown.Steps) != 3 {
		t.Errorf("run show --json: %+v", shown)
	}
	// Step timings: the runner's start and end of each step, and the
	// duration between them (pins the step times the server keeps).
	for _, st := range shown.Steps {
		if st.Index == api.SetupStep {
			continue
		}
		if st.StartedAt == nil || st.FinishedAt == nil || st.DurationMS == nil || *st.DurationMS != 1500 ||
			st.FinishedAt.Sub(*st.StartedAt) != 1500*time.Millisecond {
			t.Errorf("run show --json: step %d times %v..%v, duration %v; want 1.5 s apart", st.Index, st.StartedAt, st.FinishedAt, st.DurationMS)
		}
	}
	r = mustRun(t, e, ExitOK, nil, "run", "show", fmt.Sprint(run.ID))
	for _, want := range []string{"failed (exit-code)", "build", "test", "build-1", "admin/app", "(push by admin)", "STARTED", "ENDED", "DURATION", "1.5s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run show lacks %q:\n%s", want, r.stdout)
		}
	}
	// A finished run cannot be cancelled.
	mustRun(t, e, ExitFailed, nil, "run", "cancel", fmt.Sprint(run.ID))
}

// oneStepLogs checks run logs --step of the run
// TestRunLogsFollow_StreamsAPushedRunToTheEndAndExits1OnFailure played
// (step 1 succeeded, step 2 failed), with and without -f.
func oneStepLogs(t *testing.T, e env, id int64) {
	t.Helper()
	const step1 = "── step 1/2: build ──\nhello from build\nsecond line\n── succeeded, exit 0, 1.5s ──\n"
	if r := mustRun(t, e, ExitOK, nil, "run", "logs", fmt.Sprint(id), "--step", "1"); r.stdout != step1 {
		t.Errorf("--step 1:\n%s", r.stdout)
	}
	mustRun(t, e, ExitNotFound, nil, "run", "logs", fmt.Sprint(id), "--step", "7")
	// One step followed: the same, and the exit code is that step's.
	if r := mustRun(t, e, ExitOK, nil, "run", "logs", fmt.Sprint(id), "--step", "1", "-f"); r.stdout != step1 {
		t.Errorf("--step 1 -f:\n%s", r.stdout)
	}
	mustRun(t, e, ExitFailed, nil, "run", "logs", fmt.Sprint(id), "--step", "2", "-f")
	mustRun(t, e, ExitNotFound, nil, "run", "logs", fmt.Sprint(id), "--step", "7", "-f")
}

func TestRunLogsFollow_SucceededRunExits0(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	rn := srv.RegisterRunner(t, "admin/app", "build-1", nil, true)
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": workflowTwoSteps}, "refs/heads/main")
	steps := []stepScript{
		{name: "build", log: "ok\n", state: api.StepSucceeded},
		{name: "test", log: "ok\n", state: api.StepSucceeded},
	}
	run := playRun(t, rn, "", steps, api.StateSucceeded, 0, nil)
	r := mustRun(t, e, ExitOK, nil, "run", "logs", fmt.Sprint(run.ID), "-f")
	if strings.Contains(r.stdout, "── setup") {
		t.Errorf("an empty setup log was framed:\n%s", r.stdout)
	}
	if !strings.HasSuffix(r.stdout, fmt.Sprintf("run %d (ci): succeeded, exit 0\n", run.ID)) {
		t.Errorf("summary:\n%s", r.stdout)
	}
}

func TestRunLogs_BrokenWorkflowShowsFileLineCol(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/bad.yml": brokenWorkflow}, "refs/heads/main")
	r := mustRun(t, e, ExitFailed, nil, "run", "logs", "--repo", "admin/app", "--latest", "-f", "--timeout", "20s")
	if !strings.Contains(r.stdout, ".knotless/workflows/bad.yml:3:1: ") || !strings.Contains(r.stdout, "errored, workflow-invalid") {
		t.Errorf("logs of an errored run:\n%s", r.stdout)
	}
	// The setup footer uses the run's word, as the summary does.
	if !strings.Contains(r.stdout, "── errored, workflow-invalid ──\n") || strings.Contains(r.stdout, "── failed") {
		t.Errorf("setup footer of an errored run:\n%s", r.stdout)
	}
}

func TestRunTriggerAndCancel(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	wf := strings.Replace(workflowTwoSteps, "  push: {}\n", "  manual: {}\n", 1)
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": wf}, "refs/heads/main")
	r := mustRun(t, e, ExitOK, nil, "run", "trigger", "--repo", "admin/app", "--ref", "main", "--json")
	var p api.Pipeline
	decodeJSON(t, r.stdout, &p)
	if len(p.Runs) != 1 || p.Runs[0].State != api.StateQueued || p.Event != "manual" {
		t.Fatalf("trigger: %+v", p)
	}
	id := fmt.Sprint(p.Runs[0].ID)
	r = mustRun(t, e, ExitOK, nil, "run", "cancel", id)
	if !strings.Contains(r.stdout, "cancelled") {
		t.Errorf("cancel output %q", r.stdout)
	}
	r = mustRun(t, e, ExitFailed, nil, "run", "logs", id, "-f")
	if !strings.Contains(r.stdout, "(ci): cancelled") || strings.Contains(r.stdout, "cancelled, cancelled") {
		t.Errorf("logs of a cancelled run (the reason must not repeat the state):\n%s", r.stdout)
	}
	r = mustRun(t, e, ExitOK, nil, "run", "show", id)
	if !strings.HasPrefix(r.stdout, "Run "+id+": cancelled\n") {
		t.Errorf("run show of a cancelled run:\n%s", r.stdout)
	}
	// No workflow named so: not found.
	mustRun(t, e, ExitNotFound, nil, "run", "trigger", "--repo", "admin/app", "--workflow", "nope")
}

// A value with a NUL byte was set, and every run using it then ended
// errored (executor): set refuses it, saying why, and nothing is stored.
func TestSecret_SetWithNULIsRefusedSayingWhy(t *testing.T) {
	_, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	r := mustRun(t, e, ExitFailed, strings.NewReader("hello\x00world\n"), "secret", "set", "TOKEN", "--repo", "admin/app")
	if !strings.Contains(r.stderr, "secret TOKEN: the value holds a NUL byte (at byte 5 of 11): an environment variable cannot hold NUL") ||
		!strings.Contains(r.stderr, "not set") || strings.Contains(r.stderr, "world") {
		t.Errorf("stderr %q", r.stderr)
	}
	r = mustRun(t, e, ExitOK, nil, "secret", "list", "--repo", "admin/app", "--json")
	var out api.ListSecretsOutput
	decodeJSON(t, r.stdout, &out)
	if len(out.Secrets) != 0 {
		t.Errorf("secrets after the refused set: %+v", out.Secrets)
	}
}

// TestRunnerToken_PrintsOnlyTheTokenOnStdout: knotless runner token prints
// a registration token alone on stdout (for $(...)) and how to use it on
// stderr; bad --expires and --uses are usage errors.
func TestRunnerToken_PrintsOnlyTheTokenOnStdout(t *testing.T) {
	_, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	r := mustRun(t, e, ExitOK, nil, "runner", "token", "--repo", "admin/app", "--expires", "2h", "--uses", "3")
	if tok := strings.TrimSpace(r.stdout); !strings.HasPrefix(tok, "knreg_") || strings.ContainsAny(tok, " \n") {
		t.Errorf("stdout %q, want one knreg_ token", r.stdout)
	}
	if !strings.Contains(r.stderr, "3 use(s)") || !strings.Contains(r.stderr, "KNOTLESS_REGISTRATION_TOKEN") {
		t.Errorf("stderr %q", r.stderr)
	}
	mustRun(t, e, ExitUsage, nil, "runner", "token", "--repo", "admin/app", "--uses", "0")
	mustRun(t, e, ExitUsage, nil, "runner", "token", "--repo", "admin/app", "--expires", "0s")
}
