package server_test

import (
	"crypto/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

func TestGit_PushAndCloneWithTokenAsPassword(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{"README": "hello\n"})
	// A large random file makes git send the pack chunked.
	big := make([]byte, 3<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	servertest.Git(t, dir, "add", "big.bin")
	servertest.Git(t, dir, "commit", "-q", "-m", "big")
	f.push(t, dir, "main")

	clone := filepath.Join(t.TempDir(), "clone")
	servertest.Git(t, "", "clone", "-q", f.GitURL(f.repo, f.token), clone)
	if b, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(b) != "hello\n" {
		t.Fatalf("cloned README = %q, %v", b, err)
	}
	if got, want := servertest.Git(t, clone, "rev-parse", "HEAD"), servertest.Git(t, dir, "rev-parse", "HEAD"); got != want {
		t.Fatalf("clone HEAD %s, pushed %s", got, want)
	}
	// The admin may clone too.
	servertest.Git(t, "", "clone", "-q", f.GitURL(f.repo, f.AdminToken), filepath.Join(t.TempDir(), "admin"))
}

// TestGit_FetchOverEveryProtocolVersion pins the server's own
// upload-pack (no http-backend) for clients asking for protocol v0 and v2
// (both answered in v0, see uploadpack.go): clone, and a fetch by SHA of
// a commit no branch names any more but one reaches.
func TestGit_FetchOverEveryProtocolVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{"README": "one\n"})
	f.push(t, dir, "main")
	first := servertest.Git(t, dir, "rev-parse", "HEAD")
	servertest.Commit(t, dir, map[string]string{"README": "two\n"}, "two")
	f.push(t, dir, "main")
	for _, v := range []string{"0", "2"} {
		clone := filepath.Join(t.TempDir(), "clone")
		servertest.Git(t, "", "-c", "protocol.version="+v, "clone", "-q", f.GitURL(f.repo, f.token), clone)
		if b, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(b) != "two\n" {
			t.Fatalf("protocol %s: cloned README = %q, %v", v, b, err)
		}
		bare := filepath.Join(t.TempDir(), "bare")
		servertest.Git(t, "", "init", "-q", "--bare", bare)
		servertest.Git(t, bare, "-c", "protocol.version="+v, "fetch", "-q", f.GitURL(f.repo, f.token), first+":refs/x")
		if got := servertest.Git(t, bare, "rev-parse", "refs/x"); got != first {
			t.Fatalf("protocol %s: fetched %s, want %s", v, got, first)
		}
	}
}

func TestGit_WrongOrMissingTokenIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{"README": "hello\n"})
	if out, err := servertest.GitErr(t, dir, "push", f.GitURL(f.repo, "knl_wrong"), "main"); err == nil {
		t.Fatalf("push with a wrong token succeeded:\n%s", out)
	}
	bob := f.CreateAccount(t, "bob")
	out, err := servertest.GitErr(t, dir, "push", f.GitURL(f.repo, bob), "main")
	if err == nil || !strings.Contains(out, "no repository alice/app") {
		t.Fatalf("push by a non-owner: err %v, want 404 (as for a repository that does not exist):\n%s", err, out)
	}
	if out, err := servertest.GitErr(t, "", "clone", f.GitURL(f.repo, bob), filepath.Join(t.TempDir(), "c")); err == nil {
		t.Fatalf("clone by a non-owner succeeded:\n%s", out)
	}
	// Without credentials: 401 with a Basic challenge.
	resp, err := http.Get(f.URL + "/alice/app.git/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Basic realm="knotless"` {
		t.Fatalf("anonymous fetch: %d %q, want 401 with a Basic challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}

func TestGit_RunTokenFetchesOnlyWhileRunIsActiveAndCannotPush(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	if c.GitURL != "/alice/app.git" || !strings.HasPrefix(c.RunToken, "knr_") {
		t.Fatalf("claim: GitURL %q RunToken prefix %q", c.GitURL, c.RunToken[:4])
	}
	url := f.GitURL(f.repo, c.RunToken)
	// Fetch the run's exact commit, as the runner does.
	mirror := t.TempDir()
	servertest.Git(t, mirror, "init", "-q", "--bare")
	servertest.Git(t, mirror, "fetch", "-q", url, c.Run.SHA)
	if got := servertest.Git(t, mirror, "rev-parse", "FETCH_HEAD"); got != c.Run.SHA {
		t.Fatalf("fetched %s, want %s", got, c.Run.SHA)
	}
	// No push with a run token.
	work := servertest.WorkTree(t, map[string]string{"x": "y\n"})
	if out, err := servertest.GitErr(t, work, "push", url, "main:refs/heads/evil"); err == nil || !strings.Contains(out, "403") {
		t.Fatalf("push with a run token: err %v, want 403:\n%s", err, out)
	}
	// Another repository of the same owner (a submodule's): yes.
	f.CreateRepo(t, f.token, "other")
	f.Push(t, "alice/other", f.token, map[string]string{"lib.txt": "lib\n"}, "main")
	if out, err := servertest.GitErr(t, "", "clone", "-q", f.GitURL("alice/other", c.RunToken), filepath.Join(t.TempDir(), "o")); err != nil {
		t.Fatalf("clone of another repository of the run's owner with a run token failed: %v\n%s", err, out)
	}
	// A repository of another account: no, and the message says why.
	bob := f.CreateAccount(t, "bob")
	f.CreateRepo(t, bob, "bob/private")
	f.Push(t, "bob/private", bob, map[string]string{"secret.txt": "s\n"}, "main")
	out, err := servertest.GitErr(t, "", "clone", "-q", f.GitURL("bob/private", c.RunToken), filepath.Join(t.TempDir(), "b"))
	if err == nil {
		t.Fatalf("clone of another account's repository with a run token succeeded:\n%s", out)
	}
	if !strings.Contains(out, "no repository bob/private for a run of") {
		t.Errorf("clone of another account's repository with a run token: want 404, as for one that does not exist:\n%s", out)
	}
	// Once the run is final, the token is dead.
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: c.Run.ID, State: api.StateSucceeded}, nil)
	if out, err := servertest.GitErr(t, mirror, "fetch", "-q", url, c.Run.SHA); err == nil {
		t.Fatalf("fetch with the token of a finished run succeeded:\n%s", out)
	}
}
