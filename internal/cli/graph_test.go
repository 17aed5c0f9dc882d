package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// lint --expand prints every run a file makes: a 3×3 matrix less one
// exclude is 8 runs, named by their values.
func TestWorkflowLint_ExpandPrintsTheMatrixRunsNeedsAndRetry(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".knotless/workflows/test.yml"), `matrix:
  os: [debian, alpine, ubuntu]
  go: ["1.24", "1.25", "1.26"]
  exclude:
    - {os: alpine, go: "1.24"}
retry: {max: 2, when: [evicted]}
steps: [{run: go test ./...}]
`)
	writeFile(t, filepath.Join(dir, ".knotless/workflows/report.yml"), "needs: [test]\nsteps: [{run: make report}]\n")
	r := runCLI(t, env{}, dir, nil, "workflow", "lint", "--expand")
	if r.code != ExitOK {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		".knotless/workflows/report.yml: 1 run, needs test\n  report\n",
		".knotless/workflows/test.yml: 8 runs, retried up to 2 times on evicted\n  test (debian, 1.24)    [os=debian, go=1.24]\n",
		"  test (ubuntu, 1.26)    [os=ubuntu, go=1.26]\n2 workflows OK\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("lint --expand lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "alpine, 1.24") {
		t.Errorf("the excluded run is listed:\n%s", r.stdout)
	}
	r = runCLI(t, env{}, dir, nil, "workflow", "lint", "--expand", "--json")
	var out LintOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Runs) != 9 {
		t.Fatalf("--json: %v, %d runs:\n%s", err, len(out.Runs), r.stdout)
	}
}

// needs: entries are checked across the directory's workflows, also when
// one file is named: a cycle is an error at each entry of it.
func TestWorkflowLint_NeedsCycleIsRefusedAtItsEntries(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".knotless/workflows/a.yml"), "needs: [b]\nsteps: [{run: x}]\n")
	writeFile(t, filepath.Join(dir, ".knotless/workflows/b.yml"), "steps: [{run: x}]\nneeds: [a]\n")
	r := runCLI(t, env{}, dir, nil, "workflow", "lint")
	if r.code != ExitFailed {
		t.Fatalf("exit %d, want %d\n%s", r.code, ExitFailed, r.stdout)
	}
	want := ".knotless/workflows/a.yml:1:9: needs \"b\" makes a cycle (a → b → a): a workflow cannot wait for itself\n" +
		".knotless/workflows/b.yml:2:9: needs \"a\" makes a cycle (b → a → b): a workflow cannot wait for itself\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	// One file named: its sibling still resolves the name.
	r = runCLI(t, env{}, dir, nil, "workflow", "lint", ".knotless/workflows/a.yml")
	if r.code != ExitFailed || !strings.Contains(r.stdout, "a.yml:1:9: needs \"b\" makes a cycle") || strings.Contains(r.stdout, "b.yml") {
		t.Errorf("lint of a.yml alone: exit %d\n%s", r.code, r.stdout)
	}
}

// run list --pipeline shows the pipeline's graph: stages by needs, a
// matrix's runs under their workflow, a retry under its first attempt.
func TestPrintGraph_StagesMatrixGroupAndAttempts(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &session{now: func() time.Time { return now }}
	const m = ".knotless/workflows/test.yml"
	mv := func(v string) []api.MatrixValue { return []api.MatrixValue{{Name: "os", Value: v}} }
	runs := []api.Run{
		{ID: 1, Pipeline: 9, Ref: "refs/heads/main", SHA: "abcdef0123", Event: "push", WorkflowPath: ".knotless/workflows/build.yml", Workflow: "build", State: api.StateSucceeded},
		{ID: 2, Pipeline: 9, WorkflowPath: m, Workflow: "test (linux)", Matrix: mv("linux"), State: api.StateSucceeded, Needs: []api.Need{{Run: 1, Name: "build"}}},
		{ID: 3, Pipeline: 9, WorkflowPath: m, Workflow: "test (arm)", Matrix: mv("arm"), State: api.StateErrored, Reason: api.ReasonEvicted, Attempt: 1, RetriedBy: 5, Needs: []api.Need{{Run: 1, Name: "build"}}},
		{ID: 4, Pipeline: 9, WorkflowPath: ".knotless/workflows/report.yml", Workflow: "report", State: api.StateQueued, Needs: []api.Need{{Run: 2, Name: "test"}, {Run: 5, Name: "test"}}},
		{ID: 5, Pipeline: 9, WorkflowPath: m, Workflow: "test (arm)", Matrix: mv("arm"), State: api.StateRunning, Attempt: 2, RetryOf: 3, Needs: []api.Need{{Run: 1, Name: "build"}}},
	}
	var b bytes.Buffer
	if err := s.printGraph(&b, runs); err != nil {
		t.Fatal(err)
	}
	want := `Pipeline 9: main at abcdef0 (push)

STAGE  RUN  WORKFLOW               STATE                   ATTEMPT  NEEDS  DURATION
1      1    build                  succeeded               -        -      -
2      -    test (matrix, 2 runs)  1 succeeded, 1 running  -        build  -
2      2      linux                succeeded               -        -      -
2      3      arm                  errored (evicted)       1 of 2   -      -
2      5        ↻ arm              running                 2 of 2   -      -
3      4    report                 queued                  -        test   -
`
	if b.String() != want {
		t.Errorf("graph:\n%s\nwant:\n%s", b.String(), want)
	}
}
