package server_test

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// gitEnv isolates git from the machine's configuration.
func gitEnv(t *testing.T) []string {
	home := t.TempDir()
	return append(os.Environ(),
		"HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com")
}

// git runs git in dir and returns its combined output; it fails the test on
// an error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitErr(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// gitErr runs git in dir and returns its combined output and error.
func gitErr(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// newWorkTree makes a git work tree on branch main holding files (path →
// content) in one commit.
func newWorkTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	commitFiles(t, dir, files, "initial")
	return dir
}

// commitFiles writes files and commits them.
func commitFiles(t *testing.T, dir string, files map[string]string, msg string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "--allow-empty", "-m", msg)
}

// fixture is a server with one account "alice" owning "alice/app".
type fixture struct {
	*servertest.Server
	token string // alice's API token
	repo  string // "alice/app"
}

func newFixture(t *testing.T, opts servertest.Options) *fixture {
	t.Helper()
	s := servertest.Start(t, opts)
	tok := s.CreateAccount(t, "alice")
	s.CreateRepo(t, tok, "app")
	return &fixture{Server: s, token: tok, repo: "alice/app"}
}

func (f *fixture) alice() *api.Client { return f.Client(f.token) }

// push pushes refspecs of the work tree dir to the fixture's repository.
func (f *fixture) push(t *testing.T, dir string, refspecs ...string) {
	t.Helper()
	git(t, dir, append([]string{"push", "-q", f.GitURL(f.repo, f.token)}, refspecs...)...)
}

// runs lists the runs of the fixture's repository, newest first.
func (f *fixture) runs(t *testing.T) []api.Run {
	t.Helper()
	var out api.ListRunsOutput
	if err := f.alice().Query(context.Background(), api.MethodListRuns, url.Values{"repo": {f.repo}}, &out); err != nil {
		t.Fatal(err)
	}
	return out.Runs
}

// runLog reads a step's whole log.
func (f *fixture) runLog(t *testing.T, run int64, step int) string {
	t.Helper()
	resp, err := f.alice().Do(context.Background(), "GET", api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {fmt.Sprint(step)}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// byWorkflow indexes runs by workflow path.
func byWorkflow(runs []api.Run) map[string]api.Run {
	m := map[string]api.Run{}
	for _, r := range runs {
		m[r.WorkflowPath] = r
	}
	return m
}

// queuedWorkflow is a valid workflow text selected by pushes to branches.
func queuedWorkflow(extra string) string {
	return "on:\n  push: {}\n  manual: {}\n" + extra + "steps:\n  - run: echo hello\n"
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int64) string { return fmt.Sprint(n) }
