package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const validWorkflow = `name: ci
on:
  push:
    branches: [main]
steps:
  - name: build
    run: echo building
`

// brokenWorkflow has an unknown key at line 3 and a bad duration at line 4.
const brokenWorkflow = `name: broken
on: {push: {}}
stesp:
timeout: soon
steps:
  - run: echo ok
`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWorkflowLint_DefaultFilesValidIsZero(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".knotless/workflows/ci.yml"), validWorkflow)
	writeFile(t, filepath.Join(dir, ".knotless/workflows/other.yaml"), strings.Replace(validWorkflow, "name: ci", "name: other", 1))
	writeFile(t, filepath.Join(dir, ".knotless/workflows/notes.txt"), "not a workflow: {")
	// No server, no config: lint must not need them.
	r := runCLI(t, env{}, dir, nil, "workflow", "lint")
	if r.code != ExitOK {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	want := ".knotless/workflows/notes.txt: not a workflow, will not run: the file name ends in .txt: workflows are files named *.yml or *.yaml\n2 workflows OK\n"
	if r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
}

func TestWorkflowLint_BrokenFilePrintsFileLineColAndExits1(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yml")
	bad := filepath.Join(dir, "bad.yml")
	writeFile(t, good, validWorkflow)
	writeFile(t, bad, brokenWorkflow)
	r := runCLI(t, env{}, "", nil, "workflow", "lint", good, bad)
	if r.code != ExitFailed {
		t.Fatalf("exit %d, want 1; stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(bad) + `:(\d+):(\d+): .+`)
	var gotLines []string
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("line is not %s:LINE:COL: message: %q", bad, l)
			continue
		}
		gotLines = append(gotLines, m[1])
	}
	if strings.Join(gotLines, ",") != "3,4" {
		t.Errorf("problems at lines %v, want 3 (stesp) and 4 (timeout); stdout:\n%s", gotLines, r.stdout)
	}
	if !strings.Contains(r.stderr, "in 1 of 2 workflow") {
		t.Errorf("stderr %q does not sum up", r.stderr)
	}
}

func TestWorkflowLint_JSONListsProblems(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yml")
	writeFile(t, bad, brokenWorkflow)
	r := runCLI(t, env{}, "", nil, "workflow", "lint", "--json", bad)
	if r.code != ExitFailed {
		t.Fatalf("exit %d", r.code)
	}
	var out LintOutput
	decodeJSON(t, r.stdout, &out)
	if len(out.Problems) != 2 || out.Problems[0].File != bad || out.Problems[0].Line != 3 || out.Problems[0].Col == 0 {
		t.Errorf("problems: %+v", out.Problems)
	}
}

func TestWorkflowLint_MissingFileAndNoWorkflowsFail(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, env{}, dir, nil, "workflow", "lint")
	if r.code != ExitFailed || !strings.Contains(r.stderr, "no workflows found") {
		t.Errorf("empty dir: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, env{}, dir, nil, "workflow", "lint", "nope.yml")
	if r.code != ExitFailed || !strings.HasPrefix(r.stdout, "nope.yml: cannot read") {
		t.Errorf("missing file: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestWorkflowLint_FromASubdirectoryFindsTheCheckoutsWorkflows pins lint
// working only from the repository's root.
func TestWorkflowLint_FromASubdirectoryFindsTheCheckoutsWorkflows(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(dir, ".knotless/workflows/ci.yml"), validWorkflow)
	writeFile(t, filepath.Join(dir, ".knotless/workflows/bad.yml"), brokenWorkflow)
	sub := filepath.Join(dir, "internal", "pkg")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, env{}, sub, nil, "workflow", "lint")
	if r.code != ExitFailed {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// Problems are named as seen from where lint ran.
	if !strings.Contains(r.stdout, "../../.knotless/workflows/bad.yml:3:1: ") {
		t.Errorf("stdout %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "of 2 workflow") {
		t.Errorf("stderr %q", r.stderr)
	}
}
