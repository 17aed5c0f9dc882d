package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// A push with one good and one broken workflow: following the pipeline from
// the CLI shows the good run's output framed by step headers and footers,
// the broken file's FILE:LINE:COL, and exits 1 because one run errored.
func TestE2E_PushRunsPipelineAndCLIFollowsIt(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	w.commit(map[string]string{
		".knotless/workflows/ok.yml": `on:
  push:
    branches: [main]
steps:
  - name: greet
    run: |
      echo "hello from $KNOTLESS_WORKFLOW"
      echo "second line"
  - name: count
    run: for i in 1 2 3; do echo "count $i"; done
`,
		".knotless/workflows/broken.yml": `on:
  push: {}
steps:
  - name: bad
    run: echo never
    colour: blue
`,
	})
	w.git("push", "-q", w.url+"/"+w.repo+".git", "HEAD:refs/heads/main")

	res := w.cli("", "run", "logs", "--repo", w.repo, "--latest", "-f", "--timeout", "60s")
	if res.code != 1 {
		t.Fatalf("run logs -f: exit %d, want 1 (one run errored)\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	for _, want := range []string{
		"── step 1/2: greet ──\nhello from ok\nsecond line\n── succeeded, exit 0",
		"── step 2/2: count ──\ncount 1\ncount 2\ncount 3\n── succeeded, exit 0",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("run logs output lacks %q:\n%s", want, res.stdout)
		}
	}
	if !regexp.MustCompile(`\.knotless/workflows/broken\.yml:6:5: `).MatchString(res.stdout) {
		t.Errorf("run logs output lacks the broken file's FILE:LINE:COL (.knotless/workflows/broken.yml:6:5):\n%s", res.stdout)
	}

	var list api.ListRunsOutput
	if err := json.Unmarshal([]byte(w.cliOK("", "run", "list", "--repo", w.repo, "--json")), &list); err != nil {
		t.Fatalf("run list --json: %v", err)
	}
	byPath := map[string]api.Run{}
	for _, r := range list.Runs {
		byPath[r.WorkflowPath] = r
	}
	if len(list.Runs) != 2 {
		t.Fatalf("run list --json has %d runs, want 2: %+v", len(list.Runs), list.Runs)
	}
	if r := byPath[".knotless/workflows/broken.yml"]; r.State != api.StateErrored || r.Reason != api.ReasonWorkflowInvalid {
		t.Errorf("broken workflow: %s, want errored/workflow-invalid", describe(r))
	}
	if r := byPath[".knotless/workflows/ok.yml"]; r.State != api.StateSucceeded {
		t.Errorf("good workflow: %s, want succeeded", describe(r))
	}
}
