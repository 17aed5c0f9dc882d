package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocs_SharedStepExampleLoads checks the ```yaml step.yml blocks of
// docs/workflow.md with the runner's own loader, and the input names the
// page promises for the example.
func TestDocs_SharedStepExampleLoads(t *testing.T) {
	raw, err := os.ReadFile("../../docs/workflow.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```yaml step.yml" {
			continue
		}
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		blocks = append(blocks, strings.Join(body, "\n")+"\n")
	}
	if len(blocks) == 0 {
		t.Fatal("docs/workflow.md has no ```yaml step.yml example")
	}
	for i, b := range blocks {
		root := t.TempDir()
		dir := filepath.Join(root, ".knotless", "steps", "lint")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, SharedStepFile), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := LoadSharedStep(root, "./.knotless/steps/lint")
		if err != nil {
			t.Fatalf("example %d does not load: %v\n%s", i, err, b)
		}
		if i > 0 {
			continue
		}
		env, err := st.InputEnv(map[string]string{"config-file": ".lint.yml"})
		if err != nil {
			t.Fatalf("example inputs: %v", err)
		}
		if env["KNOTLESS_INPUT_CONFIG_FILE"] != ".lint.yml" || env["KNOTLESS_INPUT_LEVEL"] != "normal" {
			t.Errorf("example inputs give %v", env)
		}
		if _, err := st.InputEnv(nil); err == nil || !strings.Contains(err.Error(), `input "config-file" is required`) {
			t.Errorf("a missing required input: %v", err)
		}
	}
}
