package servertest

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitEnv is the process environment plus what makes git behave the same on
// every machine, with or without a ~/.gitconfig: no system or user
// configuration (HOME and XDG_CONFIG_HOME are a fresh temporary directory),
// no prompts, and a fixed author and committer. extra comes last and so
// wins over the same names earlier.
func gitEnv(t testing.TB, extra ...string) []string {
	home := t.TempDir()
	env := append(os.Environ(),
		"HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com")
	return append(env, extra...)
}

func runGit(t testing.TB, dir string, env []string, args []string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// GitErr runs git with args in dir ("" for the test's working directory)
// with a clean environment (no system or user configuration, a fixed author
// and committer, no prompts) and returns its combined stdout and stderr
// with surrounding white space trimmed, and its error (an *exec.ExitError
// when git exits non-zero). For commands that are expected to fail.
func GitErr(t testing.TB, dir string, args ...string) (string, error) {
	t.Helper()
	return runGit(t, dir, gitEnv(t), args)
}

// Git is GitErr that fails the test when git fails; it returns the trimmed
// output (e.g. a commit id for "rev-parse HEAD").
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := GitErr(t, dir, args...)
	if err != nil {
		t.Fatalf("servertest: git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Commit writes files (slash-separated path → content, mode 0644, parent
// directories made) into the work tree dir, commits everything with message
// msg (an empty commit when nothing changed) and returns the commit id.
func Commit(t testing.TB, dir string, files map[string]string, msg string) string {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatalf("servertest: %v", err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatalf("servertest: %v", err)
		}
	}
	Git(t, dir, "add", "-A")
	Git(t, dir, "commit", "-q", "--allow-empty", "-m", msg)
	return Git(t, dir, "rev-parse", "HEAD")
}

// WorkTree makes a git work tree in a new temporary directory, on branch
// main, holding files (as Commit takes them) in one commit, and returns its
// path.
func WorkTree(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	Git(t, dir, "init", "-q", "-b", "main")
	Commit(t, dir, files, "initial")
	return dir
}

// PushDir runs "git push" of refspecs (e.g. "main", "HEAD:refs/heads/main",
// "refs/tags/v1", ":dev" to delete) from the work tree dir to repository
// repo ("OWNER/NAME"), authenticated with token (an account or run token).
// The token travels in an http.extraHeader set through GIT_CONFIG_*
// variables of git's environment, never in the URL or argv. It fails the
// test when the push fails.
func (s *Server) PushDir(t testing.TB, dir, repo, token string, refspecs ...string) {
	t.Helper()
	auth := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("knotless:"+token))
	env := gitEnv(t, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0="+auth)
	args := append([]string{"push", "-q", s.URL + "/" + repo + ".git"}, refspecs...)
	if out, err := runGit(t, dir, env, args); err != nil {
		t.Fatalf("servertest: git push to %s %s: %v\n%s", repo, strings.Join(refspecs, " "), err, out)
	}
}

// PushDirOutput is PushDir without -q, returning git's output: its
// "remote:" lines say what the server made of the push.
func (s *Server) PushDirOutput(t testing.TB, dir, repo, token string, refspecs ...string) string {
	t.Helper()
	auth := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("knotless:"+token))
	env := gitEnv(t, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0="+auth)
	args := append([]string{"push", s.URL + "/" + repo + ".git"}, refspecs...)
	out, err := runGit(t, dir, env, args)
	if err != nil {
		t.Fatalf("servertest: git push to %s %s: %v\n%s", repo, strings.Join(refspecs, " "), err, out)
	}
	return out
}

// Push commits files (as Commit takes them) into a fresh work tree and
// pushes that commit to ref (a full ref name, e.g. "refs/heads/main") of
// repo ("OWNER/NAME") as PushDir does. It returns the commit id.
func (s *Server) Push(t testing.TB, repo, token string, files map[string]string, ref string) string {
	t.Helper()
	dir := WorkTree(t, files)
	s.PushDir(t, dir, repo, token, "HEAD:"+ref)
	return Git(t, dir, "rev-parse", "HEAD")
}
