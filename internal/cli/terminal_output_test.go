package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// runCLITerm is runCLI with stdout and stderr taken for terminals (or not).
func runCLITerm(t *testing.T, e env, terminal bool, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: e.get,
		IsTerminal: func(io.Writer) bool { return terminal }}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := a.Run(ctx, args)
	return result{code, out.String(), errb.String()}
}

// A step's output went to the terminal raw: it could set the title and
// the clipboard, clear the screen and print a fake footer over the real
// one. On a terminal it is shown escaped (colours pass); --raw and a pipe
// keep it byte for byte.
func TestRunLogs_StepOutputCannotDriveTheTerminal(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	rn := srv.RegisterRunner(t, "admin/app", "build-1", nil, true)
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": workflowTwoSteps}, "refs/heads/main")
	hostile := "\x1b[31mred\x1b[0m\n\x1b]0;TITLE\a\x1b]52;c;ZXZpbA==\a\x1b[2J\x1b[1A── succeeded, exit 0 ──\rfake\n"
	steps := []stepScript{
		{name: "build\x1b]0;STEP\a", log: hostile, state: api.StepFailed, exit: 1},
		{name: "test", log: "ok\n", state: api.StepSucceeded, exit: 0},
	}
	run := playRun(t, rn, "setup\n", steps, api.StateFailed, 1, nil)
	id := fmt.Sprint(run.ID)

	term := runCLITerm(t, e, true, "run", "logs", id)
	if term.code != ExitOK {
		t.Fatalf("run logs: exit %d, stderr %q", term.code, term.stderr)
	}
	want := "\x1b[31mred\x1b[0m\n" + `\x1b]0;TITLE\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[1A── succeeded, exit 0 ──\x0dfake` + "\n"
	if !strings.Contains(term.stdout, want) {
		t.Errorf("on a terminal, step output is\n%q\nwant it to hold\n%q", term.stdout, want)
	}
	if !strings.Contains(term.stdout, `build\x1b]0;STEP\x07`) {
		t.Errorf("the step's name is not shown escaped in its header:\n%q", term.stdout)
	}
	if n := strings.Count(term.stdout, "\x1b"); n != 2 {
		t.Errorf("%d ESC bytes reach the terminal, want 2 (the colours):\n%q", n, term.stdout)
	}
	for _, args := range [][]string{{"run", "logs", id, "--raw"}} {
		r := runCLITerm(t, e, true, args...)
		if !strings.Contains(r.stdout, hostile) {
			t.Errorf("%q on a terminal: output not byte for byte:\n%q", args, r.stdout)
		}
	}
	if r := runCLITerm(t, e, false, "run", "logs", id); !strings.Contains(r.stdout, hostile) {
		t.Errorf("run logs into a pipe: output not byte for byte:\n%q", r.stdout)
	}
	// run show names the step, escaped, on a terminal.
	show := runCLITerm(t, e, true, "run", "show", id)
	if strings.ContainsAny(show.stdout, "\x1b\a") || !strings.Contains(show.stdout, `build\x1b]0;STEP\x07`) {
		t.Errorf("run show on a terminal:\n%q", show.stdout)
	}
}

// run trigger --ref main~5 was sent and recorded as refs/heads/main~5.
func TestRunTrigger_RefRevisionExpressionIsAUsageError(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	wf := strings.Replace(workflowTwoSteps, "  push: {}\n", "  manual: {}\n", 1)
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": wf}, "refs/heads/main")
	for _, ref := range []string{"main~5", "main^{commit}", "HEAD@{1}"} {
		r := mustRun(t, e, ExitUsage, nil, "run", "trigger", "--repo", "admin/app", "--ref", ref)
		if !strings.Contains(r.stderr, "not a branch or tag name") || !strings.Contains(r.stderr, "--sha") {
			t.Errorf("--ref %s: stderr %q", ref, r.stderr)
		}
	}
	mustRun(t, e, ExitUsage, nil, "run", "trigger", "--repo", "admin/app", "--sha", "abc123")
}
