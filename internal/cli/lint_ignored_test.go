package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLint_UppercaseExtensionIsNotSilentlyIgnored pins issue 25 item 2:
// a file named CI.YML is never run by the server, so lint, of the
// directory or of the file, says so and fails instead of "1 workflow OK".
func TestLint_UppercaseExtensionIsNotSilentlyIgnored(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".knotless/workflows/UPPER.YML"), validWorkflow)
	writeFile(t, filepath.Join(dir, ".knotless/workflows/Mixed.Yaml"), validWorkflow)
	r := runCLI(t, env{}, dir, nil, "workflow", "lint")
	for _, want := range []string{
		".knotless/workflows/UPPER.YML:1:1: will not run: the file name ends in .YML, and workflows are files named *.yml or *.yaml, in lower case: rename it to UPPER.yml\n",
		".knotless/workflows/Mixed.Yaml:1:1: will not run: the file name ends in .Yaml, and workflows are files named *.yml or *.yaml, in lower case: rename it to Mixed.yaml\n",
	} {
		if r.code != ExitFailed || !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "OK") {
			t.Fatalf("lint of the directory: exit %d, stdout %q; want exit 1 and %q", r.code, r.stdout, want)
		}
	}
	r = runCLI(t, env{}, dir, nil, "workflow", "lint", ".knotless/workflows/UPPER.YML")
	if r.code != ExitFailed || !strings.Contains(r.stdout, "UPPER.YML:1:1: will not run") || strings.Contains(r.stdout, "OK") {
		t.Fatalf("lint of the file: exit %d, stdout %q, stderr %q; want exit 1 saying it will not run", r.code, r.stdout, r.stderr)
	}
}

// TestLint_FilesThatAreNotWorkflowsAreListedWithWhy: every other entry of
// .knotless/workflows is listed with the reason the server skips it;
// naming one explicitly fails.
func TestLint_FilesThatAreNotWorkflowsAreListedWithWhy(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, ".knotless/workflows")
	writeFile(t, filepath.Join(wf, "ci.yml"), validWorkflow)
	writeFile(t, filepath.Join(wf, "x.yaml.bak"), validWorkflow)
	writeFile(t, filepath.Join(wf, "c.json"), `{"steps": [{"run": "echo"}]}`)
	writeFile(t, filepath.Join(wf, "Makefile"), "all:\n")
	writeFile(t, filepath.Join(wf, "sub/deep.yml"), validWorkflow)
	r := runCLI(t, env{}, dir, nil, "workflow", "lint")
	for _, want := range []string{
		".knotless/workflows/x.yaml.bak: not a workflow, will not run: the file name ends in .bak: workflows are files named *.yml or *.yaml\n",
		".knotless/workflows/c.json: not a workflow, will not run: the file name ends in .json: workflows are files named *.yml or *.yaml (YAML reads JSON: rename it to c.yml to run it)\n",
		".knotless/workflows/Makefile: not a workflow, will not run: the file name has no extension",
		".knotless/workflows/sub: not a workflow, will not run: a directory: workflows are the files directly in .knotless/workflows, none below it\n",
		"1 workflow OK\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.code != ExitOK {
		t.Errorf("exit %d: files that are not workflows are notes, not problems", r.code)
	}
	r = runCLI(t, env{}, dir, nil, "workflow", "lint", "--json")
	var out LintOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Ignored) != 4 || len(out.Files) != 1 {
		t.Errorf("--json: %v, %+v", err, out)
	}
	for _, f := range []string{"c.json", "x.yaml.bak"} {
		r = runCLI(t, env{}, dir, nil, "workflow", "lint", filepath.Join(".knotless/workflows", f))
		if r.code != ExitFailed || !strings.Contains(r.stdout, f+": will not run: the file name ends in") {
			t.Errorf("lint %s: exit %d, stdout %q", f, r.code, r.stdout)
		}
	}
	// A directory holding only files that are not workflows says which.
	if err := os.RemoveAll(filepath.Join(wf, "ci.yml")); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, env{}, dir, nil, "workflow", "lint")
	if r.code != ExitFailed || !strings.Contains(r.stdout, "c.json: not a workflow") || !strings.Contains(r.stderr, "no workflows found") {
		t.Errorf("only non-workflows: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestLint_BidiOverrideInWorkflowNameIsRefused: the CLI prints the
// workflow package's message (every category is pinned there) without
// the character itself.
func TestLint_BidiOverrideInWorkflowNameIsRefused(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".knotless/workflows/ci.yml"), "name: \"ok\u202Eevil\"\nsteps:\n  - name: \"a\u2028b\"\n    run: x\n")
	r := runCLI(t, env{}, dir, nil, "workflow", "lint")
	for _, want := range []string{
		`.knotless/workflows/ci.yml:1:7: name "ok\u202eevil": character 3 is U+202E RIGHT-TO-LEFT OVERRIDE;`,
		`.knotless/workflows/ci.yml:3:11: step 1 name "a\u2028b": character 2 is U+2028 LINE SEPARATOR;`,
	} {
		if r.code != ExitFailed || !strings.Contains(r.stdout, want) {
			t.Errorf("exit %d, stdout %q; want %q", r.code, r.stdout, want)
		}
	}
	if strings.ContainsAny(r.stdout+r.stderr, "\u202E\u2028") {
		t.Error("the output holds the characters themselves")
	}
}
