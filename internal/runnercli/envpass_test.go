package runnercli

import (
	"path/filepath"
	"strings"
	"testing"
)

// --env-pass (repeatable) gives steps the runner's own values of the named
// variables and nothing else of its environment; a name not set is said,
// not fatal; a bad name is a usage error.
func TestExec_EnvPassGivesNamedVariablesOnly(t *testing.T) {
	dir := checkout(t, "on: {push: {}}\nsteps:\n  - run: echo \"p=${HTTPS_PROXY-unset} n=${NO_PROXY-unset} o=${OTHER-unset} m=${MISSING-unset}\"\n")
	wf := filepath.Join(dir, ".knotless", "workflows", "ci.yml")
	cmd, out, errb := command(dir, []string{"HTTPS_PROXY=http://proxy:3128", "NO_PROXY=localhost", "OTHER=x"},
		"exec", wf, "--env-pass", "HTTPS_PROXY", "--env-pass", "NO_PROXY,MISSING")
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "p=http://proxy:3128 n=localhost o=unset m=unset") {
		t.Errorf("step output:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "MISSING") {
		t.Errorf("no word on the missing variable:\n%s", errb.String())
	}
	cmd, _, errb = command(dir, nil, "exec", wf, "--env-pass", "NO-PROXY")
	if code := exitCode(t, cmd.Run()); code != 2 || !strings.Contains(errb.String(), "NO-PROXY") {
		t.Fatalf("bad name: exit %d, %s", code, errb.String())
	}
}

// `knotless-run exec` prints a detached step's log under its own header
// again once it has ended (at the run's end), not under the step after it.
func TestExec_DetachedStepLogGetsItsOwnHeaderAtTheEnd(t *testing.T) {
	dir := checkout(t, "on: {push: {}}\nsteps:\n  - name: svc\n    detach: true\n    run: echo \"svc up\"; exec sleep 100\n  - name: use\n    run: echo used\n")
	cmd, out, errb := command(dir, nil, "exec", filepath.Join(dir, ".knotless", "workflows", "ci.yml"))
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	want := "── step 1/2: svc ──\n── step 2/2: use ──\nused\n── succeeded, exit 0 ──\n" +
		"── step 1/2: svc ──\nsvc up\n[knotless: detached step stopped at the run's end]\n── succeeded ──\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("exec output lacks\n%s\ngot:\n%s", want, out.String())
	}
}
