package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode"

	"golang.org/x/text/unicode/rangetable"

	"knotless.dev/knotless/internal/api"
)

// TestRunList_BidiOverrideInWorkflowNameIsRefused pins issue 25 item 1
// end to end: a pushed workflow whose name holds U+202E is an errored run
// (workflow-invalid) whose log names the character, and a branch named
// with one (git allows it) shows escaped in run list and run show, on a
// terminal or not: no output holds the character itself.
func TestRunList_BidiOverrideInWorkflowNameIsRefused(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	wf := "name: \"ok\u202Eevil\"\non: {push: {}}\nsteps:\n  - name: \"build\u2028fake\"\n    run: echo\n"
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": wf}, "refs/heads/x\u202Ey")
	for _, terminal := range []bool{false, true} {
		r := runCLITerm(t, e, terminal, "run", "list", "--repo", "admin/app")
		if r.code != ExitOK || !strings.Contains(r.stdout, `x\u202ey`) || !strings.Contains(r.stdout, "errored (workflow-invalid)") {
			t.Errorf("terminal=%v: run list: exit %d\n%s%s", terminal, r.code, r.stdout, r.stderr)
		}
		if strings.ContainsAny(r.stdout+r.stderr, "\u202E\u2028") {
			t.Errorf("terminal=%v: run list prints the characters themselves:\n%q", terminal, r.stdout)
		}
	}
	r := mustRun(t, e, ExitFailed, nil, "run", "logs", "--repo", "admin/app", "--latest", "-f", "--timeout", "20s")
	for _, want := range []string{
		`.knotless/workflows/ci.yml:1:7: name "ok\u202eevil": character 3 is U+202E RIGHT-TO-LEFT OVERRIDE`,
		`.knotless/workflows/ci.yml:4:11: step 1 name "build\u2028fake": character 6 is U+2028 LINE SEPARATOR`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run logs lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.ContainsAny(r.stdout, "\u202E\u2028") {
		t.Errorf("run logs (not a terminal, byte-exact) holds the characters: the server's messages must not")
	}
}

// TestTermSafe_EveryFormatAndSeparatorCharacterIsShownEscaped: on a
// terminal every character of the categories Cf, Zl and Zp (and, as
// bytes, the C1 controls) is shown escaped, whole categories, in one write
// and byte by byte; letters of any script pass.
func TestTermSafe_EveryFormatAndSeparatorCharacterIsShownEscaped(t *testing.T) {
	n := 0
	rangetable.Visit(rangetable.Merge(unicode.Cf, unicode.Zl, unicode.Zp), func(r rune) {
		n++
		checkTermSafe(t, r, "a"+api.EscapeRune(r)+"b")
	})
	if n < 150 {
		t.Fatalf("only %d characters tried", n)
	}
	for _, r := range []rune{'é', 'ж', 'ب', '中', '✓', 0x1F600} {
		checkTermSafe(t, r, "a"+string(r)+"b")
	}
}

func checkTermSafe(t *testing.T, r rune, want string) {
	t.Helper()
	in := []byte("a" + string(r) + "b")
	for _, split := range []bool{false, true} {
		var b bytes.Buffer
		ts := newTermSafe(&b)
		if split {
			for i := range in {
				ts.Write(in[i : i+1])
			}
		} else {
			ts.Write(in)
		}
		ts.Flush()
		if b.String() != want {
			t.Errorf("%U (split %v): %q, want %q", r, split, b.String(), want)
		}
	}
}

// TestRunList_FileThatIsNotAWorkflowIsANoteOfThePipeline pins issue 25
// item 2 on the server: a push holding CI.YML gets an errored run saying
// it will not run (rename it), and c.json and x.yaml.bak are notes of the
// pipeline, which run list and run show print.
func TestRunList_FileThatIsNotAWorkflowIsANoteOfThePipeline(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{
		".knotless/workflows/ci.yml":     workflowTwoSteps,
		".knotless/workflows/CI.YML":     workflowTwoSteps,
		".knotless/workflows/c.json":     `{"steps": [{"run": "echo"}]}`,
		".knotless/workflows/x.yaml.bak": workflowTwoSteps,
	}, "refs/heads/main")
	r := mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app", "--json")
	var out api.ListRunsOutput
	decodeJSON(t, r.stdout, &out)
	if len(out.Runs) != 2 {
		t.Fatalf("runs: %+v, want ci (queued) and CI (errored)", out.Runs)
	}
	var upper api.Run
	for _, run := range out.Runs {
		if run.WorkflowPath == ".knotless/workflows/CI.YML" {
			upper = run
		}
	}
	wantMsg := ".knotless/workflows/CI.YML:1:1: will not run: the file name ends in .YML, and workflows are files named *.yml or *.yaml, in lower case: rename it to CI.yml"
	if upper.State != api.StateErrored || upper.Reason != api.ReasonWorkflowInvalid || upper.Message != wantMsg {
		t.Errorf("the run of CI.YML: %+v, want errored/workflow-invalid with %q", upper, wantMsg)
	}
	notes := []string{
		".knotless/workflows/c.json: not a workflow, not run: the file name ends in .json: workflows are files named *.yml or *.yaml (YAML reads JSON: rename it to c.yml to run it)",
		".knotless/workflows/x.yaml.bak: not a workflow, not run: the file name ends in .bak: workflows are files named *.yml or *.yaml",
	}
	if fmt.Sprint(out.Runs[0].PipelineNotes) != fmt.Sprint(notes) {
		t.Errorf("pipeline notes: %q, want %q", out.Runs[0].PipelineNotes, notes)
	}
	r = mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app")
	for _, n := range notes {
		if !strings.Contains(r.stdout, "Note, pipeline 1: "+n+"\n") {
			t.Errorf("run list lacks the note %q:\n%s", n, r.stdout)
		}
	}
	r = mustRun(t, e, ExitOK, nil, "run", "show", fmt.Sprint(upper.ID))
	if !strings.Contains(r.stdout, "Note:") || !strings.Contains(r.stdout, "c.json: not a workflow") {
		t.Errorf("run show lacks the notes:\n%s", r.stdout)
	}
}

// TestRunRerun_FinishedRunAndFailedRunsOfAPipelineRunAgain pins the API
// and CLI beneath the web view's re-run buttons (issue 25 item 3): a
// finished run runs again in a new pipeline naming the old one; a run that
// has not ended is refused; --pipeline re-runs the runs that did not
// succeed; another account may not re-run (404, as for nothing).
func TestRunRerun_FinishedRunAndFailedRunsOfAPipelineRunAgain(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	other := strings.Replace(workflowTwoSteps, "name: ci", "name: other", 1)
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{
		".knotless/workflows/ci.yml":    workflowTwoSteps,
		".knotless/workflows/other.yml": other,
	}, "refs/heads/main")
	var first api.ListRunsOutput
	decodeJSON(t, mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app", "--json").stdout, &first)
	if len(first.Runs) != 2 {
		t.Fatalf("runs %+v", first.Runs)
	}
	ci := first.Runs[0]
	if ci.Workflow != "ci" {
		ci = first.Runs[1]
	}
	r := mustRun(t, e, ExitFailed, nil, "run", "rerun", fmt.Sprint(ci.ID))
	if !strings.Contains(r.stderr, "has not ended (queued)") {
		t.Errorf("re-run of a queued run: %s", r.stderr)
	}
	mustRun(t, e, ExitFailed, nil, "run", "rerun", "--pipeline", fmt.Sprint(ci.Pipeline))
	mustRun(t, e, ExitOK, nil, "run", "cancel", fmt.Sprint(ci.ID))
	var p api.Pipeline
	decodeJSON(t, mustRun(t, e, ExitOK, nil, "run", "rerun", fmt.Sprint(ci.ID), "--json").stdout, &p)
	if p.RerunOf != ci.Pipeline || len(p.Runs) != 1 || p.Runs[0].Workflow != "ci" || p.Runs[0].State != api.StateQueued ||
		p.Ref != ci.Ref || p.SHA != ci.SHA || p.Event != ci.Event || p.Runs[0].Actor != "admin" {
		t.Fatalf("re-run of run %d: %+v", ci.ID, p)
	}
	for _, run := range first.Runs {
		if run.ID != ci.ID {
			mustRun(t, e, ExitOK, nil, "run", "cancel", fmt.Sprint(run.ID))
		}
	}
	r = mustRun(t, e, ExitOK, nil, "run", "rerun", "--pipeline", fmt.Sprint(ci.Pipeline))
	if !strings.Contains(r.stdout, fmt.Sprintf("re-runs runs of pipeline %d", ci.Pipeline)) || !strings.Contains(r.stdout, "other") {
		t.Errorf("re-run of the failed runs:\n%s", r.stdout)
	}
	// bob may not see, so may not re-run.
	var bob api.CreateAccountOutput
	decodeJSON(t, mustRun(t, e, ExitOK, nil, "account", "create", "bob", "--json").stdout, &bob)
	mustRun(t, e.with(EnvToken, bob.Token), ExitNotFound, nil, "run", "rerun", fmt.Sprint(ci.ID))
	mustRun(t, e.with(EnvToken, bob.Token), ExitNotFound, nil, "run", "rerun", "--pipeline", fmt.Sprint(ci.Pipeline))
}
