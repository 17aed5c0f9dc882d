package workflow

import (
	"os"
	"strings"
	"testing"
)

// The examples in docs/workflow.md are checked: a ```yaml block is a
// complete valid workflow, a ```yaml fragment block is valid once a step
// is added, and a ```yaml broken block gives exactly the errors of the
// ```text block that follows it.
func TestDocs_WorkflowExamplesAreTrue(t *testing.T) {
	raw, err := os.ReadFile("../../docs/workflow.md")
	if err != nil {
		t.Fatal(err)
	}
	type block struct{ info, body string }
	var blocks []block
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		info, ok := strings.CutPrefix(lines[i], "```")
		if !ok || info == "" {
			continue
		}
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		blocks = append(blocks, block{info, strings.Join(body, "\n") + "\n"})
	}
	const path = ".knotless/workflows/test.yml"
	checked := 0
	for i, b := range blocks {
		switch b.info {
		case "yaml":
			if _, err := Parse(path, []byte(b.body)); err != nil {
				t.Errorf("example %d does not parse:\n%s\n%v", i, b.body, err)
			}
		case "yaml fragment":
			if _, err := Parse(path, []byte(b.body+"steps: [{run: make}]\n")); err != nil {
				t.Errorf("fragment %d does not parse:\n%s\n%v", i, b.body, err)
			}
		case "yaml broken":
			if i+1 >= len(blocks) || blocks[i+1].info != "text" {
				t.Fatalf("broken example %d is not followed by a ```text block", i)
			}
			want := strings.TrimSpace(blocks[i+1].body)
			got := ""
			if l := LintFile(path, []byte(b.body)); l != nil {
				got = l.Error()
			}
			if got != want {
				t.Errorf("broken example %d:\n%s\ngives\n%s\nbut the page says\n%s", i, b.body, got, want)
			}
		default:
			continue
		}
		checked++
	}
	if checked < 6 {
		t.Errorf("only %d examples checked; did the page lose its examples?", checked)
	}
}
