package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// `knotless-run exec` on a checkout prints what the server shows for the
// same workflow at the same commit: the same step frames and output, the
// secret masked, the same outcome; it exits 0 for a run that succeeded and
// 1 for one whose step failed.
func TestE2E_LocalExecMatchesServerRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	secret := "local-" + randomHex(10)
	w.cliOK(secret, "secret", "set", "S", "--repo", w.repo)
	w.startRunner(w.registerRunner("r1"))
	runs := w.push(map[string]string{
		".knotless/workflows/ok.yml": `on:
  push: {}
secrets: [S]
steps:
  - name: show
    secrets: [S]
    run: |
      echo "value: $S"
      printf %s "$S" | base64
      echo "workflow $KNOTLESS_WORKFLOW"
  - name: other
    run: |
      echo "other: ${S-unset}"
`,
		".knotless/workflows/fail.yml": `on:
  push: {}
steps:
  - name: before
    run: echo before
  - name: breaks
    run: |
      echo "about to fail"
      exit 3
  - name: skipped
    run: echo never
`,
	}, 2)
	server := map[string]string{} // workflow path → `knotless run logs` output
	for _, r := range runs {
		final := w.waitFinal(r.ID, 60*time.Second)
		res := w.cli("", "run", "logs", itoa(r.ID))
		if res.code != 0 {
			t.Fatalf("run logs %d: exit %d\n%s", r.ID, res.code, res.stderr)
		}
		server[final.WorkflowPath] = res.stdout
		want := map[string]string{".knotless/workflows/ok.yml": api.StateSucceeded, ".knotless/workflows/fail.yml": api.StateFailed}[final.WorkflowPath]
		if final.State != want {
			t.Fatalf("server run of %s: %s, want %s", final.WorkflowPath, describe(final), want)
		}
	}

	for _, c := range []struct {
		file     string
		wantCode int
		wantOut  []string
	}{
		{".knotless/workflows/ok.yml", 0, []string{"── step 1/2: show ──\nvalue: ***\n***\nworkflow ok\n── succeeded, exit 0", "other: unset\n", "(ok): succeeded\n"}},
		{".knotless/workflows/fail.yml", 1, []string{"── step 2/3: breaks ──\nabout to fail\n── failed, exit 3", "(fail): failed"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, runnerBin(), "exec", c.file, "--secret", "S")
		cmd.Dir = w.src
		cmd.Env = append(baseEnv(w.home), "S="+secret)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("knotless-run exec %s: %v", c.file, err)
		}
		out := stdout.String()
		if code != c.wantCode {
			t.Errorf("knotless-run exec %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.file, code, c.wantCode, out, stderr.String())
		}
		for _, want := range c.wantOut {
			if !strings.Contains(out, want) {
				t.Errorf("knotless-run exec %s: output lacks %q:\n%s", c.file, want, out)
			}
		}
		if strings.Contains(out+stderr.String(), secret) {
			t.Errorf("knotless-run exec %s: output holds the secret:\n%s%s", c.file, out, stderr.String())
		}
		if local, remote := stepSections(out), stepSections(server[c.file]); local != remote {
			t.Errorf("%s: steps differ between knotless-run exec and the server's run\nexec:\n%s\nserver (knotless run logs):\n%s", c.file, local, remote)
		}
	}
}

var (
	footerDuration = regexp.MustCompile(`(?m)^(── [^\n]*?), [0-9.]+(ns|µs|ms|s|m[0-9.]*s?|h[0-9hms.]*)? ──$`)
	summaryRun     = regexp.MustCompile(`(?m)^run [0-9]+ \(`)
)

// stepSections is a run's printed log from the first step header on, with
// durations in footers and the run id in the summary taken out: what a run
// at the same commit prints the same way wherever it ran.
func stepSections(out string) string {
	i := strings.Index(out, "── step 1/")
	if i < 0 {
		return "(no step header)\n" + out
	}
	out = footerDuration.ReplaceAllString(out[i:], "$1 ──")
	return summaryRun.ReplaceAllString(out, "run N (")
}

// `knotless-run exec` runs the work tree as it is, so its setup log's
// first line names the commit and, when the work tree differs from it, how
// many paths do: a clean checkout reads as the commit alone.
func TestE2E_ExecSaysWhenItRunsUncommittedChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = baseEnv(t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	writeFile(t, filepath.Join(dir, ".knotless", "workflows", "ci.yml"), "on: {push: {}}\nsteps: [{run: cat data.txt}]\n")
	writeFile(t, filepath.Join(dir, "data.txt"), "committed\n")
	git("add", "-A")
	git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "one")
	head := git("rev-parse", "HEAD")
	exe := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, runnerBin(), "exec", ".knotless/workflows/ci.yml")
		cmd.Dir = dir
		cmd.Env = baseEnv(t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("exec: %v\n%s", err, out)
		}
		return string(out)
	}
	clean := regexp.MustCompile(`(?m): run 0 of local/\S+, commit ` + head + ` \(refs/heads/main\)$`)
	if out := exe(); !clean.MatchString(out) || !strings.Contains(out, "\ncommitted\n") {
		t.Errorf("a clean work tree's exec:\n%s\nwant the commit alone and the committed file", out)
	}
	writeFile(t, filepath.Join(dir, "data.txt"), "changed\n")
	writeFile(t, filepath.Join(dir, "new.txt"), "new\n")
	out := exe()
	if !strings.Contains(out, "commit "+head+" (refs/heads/main) and the work tree's uncommitted changes (2 paths)\n") || !strings.Contains(out, "\nchanged\n") {
		t.Errorf("a changed work tree's exec:\n%s\nwant the commit and its 2 changed paths, and the changed file", out)
	}
}

// writeFile writes data to path, making its directories.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
