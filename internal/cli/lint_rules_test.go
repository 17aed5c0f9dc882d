package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The server reads no workflow through a symbolic link (git stores the
// link, not what it points to); lint followed them and said "1 workflow
// OK". Both now say the same: it is a symbolic link.
func TestWorkflowLint_SymlinkedWorkflowsDirOrFileIsReportedLikeTheServer(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"workflows dir", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "ci", "ci.yml"), validWorkflow)
			mustSymlink(t, "../ci", filepath.Join(dir, ".knotless", "workflows"))
		}, ".knotless/workflows:1:1: is a symbolic link: workflows must be regular files"},
		{"knotless dir", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "kn", "workflows", "ci.yml"), validWorkflow)
			mustSymlink(t, "kn", filepath.Join(dir, ".knotless"))
		}, ".knotless:1:1: is a symbolic link: workflows must be regular files"},
		{"workflow file", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "ci", "ci.yml"), validWorkflow)
			writeFile(t, filepath.Join(dir, ".knotless", "workflows", "ok.yml"), validWorkflow)
			mustSymlink(t, "../../ci/ci.yml", filepath.Join(dir, ".knotless", "workflows", "linked.yml"))
		}, ".knotless/workflows/linked.yml:1:1: is a symbolic link: workflows must be regular files"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			r := runCLI(t, env{}, dir, nil, "workflow", "lint")
			if r.code != ExitFailed || !strings.Contains(r.stdout, c.want) || strings.Contains(r.stdout, "OK") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and %q", r.code, r.stdout, r.stderr, c.want)
			}
		})
	}
	// Named explicitly, the same rule.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "real.yml"), validWorkflow)
	mustSymlink(t, "real.yml", filepath.Join(dir, "link.yml"))
	r := runCLI(t, env{}, dir, nil, "workflow", "lint", "link.yml")
	if r.code != ExitFailed || !strings.Contains(r.stdout, "link.yml:1:1: is a symbolic link") {
		t.Errorf("lint link.yml: exit %d, stdout %q", r.code, r.stdout)
	}
}

// A file named with an escape sequence gave the workflow its name (an
// explicit name: with the same bytes is refused): lint refuses it like the
// server, and names it escaped.
func TestWorkflowLint_FileNamedWithEscapeSequenceIsRefusedAndShownEscaped(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".knotless", "workflows", "esc\x1b]0;TITLE\a\x1b[31mred.yml"), "steps:\n  - run: echo hi\n")
	r := runCLI(t, env{}, dir, nil, "workflow", "lint")
	want := `.knotless/workflows/esc\x1b]0;TITLE\x07\x1b[31mred.yml:1:1: the file name "esc\x1b]0;TITLE\x07\x1b[31mred": character 4 is U+001B (a control character)`
	if r.code != ExitFailed || !strings.Contains(r.stdout, want) || strings.ContainsAny(r.stdout+r.stderr, "\x1b\a") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and %q", r.code, r.stdout, r.stderr, want)
	}
}

func mustSymlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}
