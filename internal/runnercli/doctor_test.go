package runnercli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/runner"
	"knotless.dev/knotless/internal/server/servertest"
)

// doctorOptions is an executor (for the command's own logic: the kube
// executor's checks are tested against the cluster in its package) whose
// Doctor reports the checks it is given.
type doctorOptions struct{ fail bool }

func (*doctorOptions) Name() string  { return "checked" }
func (*doctorOptions) UsesJob() bool { return false }
func (o *doctorOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.fail, "checked-fail", false, "fail a check")
}
func (o *doctorOptions) New(executor.Setup) (executor.Executor, error) {
	return checkedExecutor{fail: o.fail}, nil
}

type checkedExecutor struct {
	executor.Executor // not called by doctor
	fail              bool
}

func (e checkedExecutor) Doctor(_ context.Context, machine bool, report func(executor.Check)) {
	report(executor.Check{Name: "engine", OK: true, Detail: "version 1"})
	report(executor.Check{Name: "test environment", OK: !e.fail || !machine, Detail: "it broke", Fix: "mend it"})
}

// doctor prints one line per check, ok or FAIL with the fix, and exits 1
// when any failed: with --state the server and the credential come first
// (a pending runner's fix is its approve command), then the executor's
// checks (a machine check only without --skip-machine).
func TestDoctor_OneLinePerCheckWithTheFixAndExitOneOnAFail(t *testing.T) {
	saved := executors
	executors = append(append([]func() executor.Options(nil), saved...), func() executor.Options { return &doctorOptions{} })
	t.Cleanup(func() { executors = saved })

	srv := servertest.Start(t, servertest.Options{})
	tok := srv.CreateAccount(t, "alice")
	srv.CreateRepo(t, tok, "app")
	tmp := t.TempDir()
	state := filepath.Join(tmp, "state.json")
	var reg api.RegistrationToken
	if err := srv.Client(tok).Procedure(context.Background(), api.MethodCreateRegistrationToken,
		api.CreateRegistrationTokenInput{Repo: "alice/app"}, &reg); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KNOTLESS_REGISTRATION_TOKEN", reg.Token)
	if code, _, errb := mainInProcess("login", "--server", srv.URL, "--repo", "alice/app", "--name", "r1", "--state", state); code != 0 {
		t.Fatalf("login: exit %d: %s", code, errb)
	}
	st, err := runner.LoadState(state)
	if err != nil {
		t.Fatal(err)
	}

	code, out, errb := mainInProcess("doctor", "--executor", "checked", "--state", state)
	if code != 1 || !strings.Contains(out, "FAIL  credential accepted: the runner is not approved yet; fix: "+st.ApproveCommand()+"\n") {
		t.Fatalf("pending runner: exit %d, stdout:\n%s\nstderr: %s", code, out, errb)
	}
	if err := srv.Client(tok).Procedure(context.Background(), api.MethodApproveRunner, api.RunnerRef{Repo: "alice/app", Name: "r1", DID: st.DID}, nil); err != nil {
		t.Fatal(err)
	}
	code, out, errb = mainInProcess("doctor", "--executor", "checked", "--state", state)
	want := "ok    state file: runner r1 of alice/app (" + st.DID + ")\n" +
		"ok    server reachable: " + srv.URL + " (knotless-server "
	if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, "ok    credential accepted: runner r1 is approved\nok    engine: version 1\nok    test environment: it broke\n") {
		t.Fatalf("approved runner: exit %d, stdout:\n%s\nstderr: %s", code, out, errb)
	}
	code, out, _ = mainInProcess("doctor", "--executor", "checked", "--checked-fail")
	if code != 1 || out != "ok    engine: version 1\nFAIL  test environment: it broke; fix: mend it\n" {
		t.Fatalf("failed check: exit %d, stdout:\n%s", code, out)
	}
	code, out, _ = mainInProcess("doctor", "--executor", "checked", "--checked-fail", "--skip-machine")
	if code != 0 || strings.Contains(out, "FAIL") {
		t.Fatalf("--skip-machine: exit %d, stdout:\n%s", code, out)
	}
	srv.Stop()
	code, out, _ = mainInProcess("doctor", "--executor", "checked", "--state", state)
	if code != 1 || !strings.Contains(out, "FAIL  server reachable: "+srv.URL) || !strings.Contains(out, "; fix: check the server URL") {
		t.Fatalf("server down: exit %d, stdout:\n%s", code, out)
	}
}
