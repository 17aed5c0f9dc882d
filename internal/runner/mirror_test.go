package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testenv"
)

// sourceRepo makes a repository with one commit per content and returns
// its path and the SHAs. It serves any SHA, as the server does.
func sourceRepo(t *testing.T, contents ...string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	servertest.Git(t, dir, "init", "-q", "-b", "main")
	servertest.Git(t, dir, "config", "uploadpack.allowAnySHA1InWant", "true")
	var shas []string
	for _, c := range contents {
		shas = append(shas, servertest.Commit(t, dir, map[string]string{"file.txt": c}, c))
	}
	return dir, shas
}

func TestMirrors_CheckoutFetchesOnlyMissingCommits(t *testing.T) {
	src, shas := sourceRepo(t, "one", "two")
	m := &Mirrors{Root: filepath.Join(t.TempDir(), "mirrors")}
	ctx := context.Background()

	var log bytes.Buffer
	ws1 := filepath.Join(t.TempDir(), "ws")
	if err := m.Checkout(ctx, Fetch{Repo: "alice/app", URL: src, SHA: shas[0], Token: "tok"}, ws1, &log); err != nil {
		t.Fatalf("checkout: %v\n%s", err, log.String())
	}
	if got, _ := os.ReadFile(filepath.Join(ws1, "file.txt")); string(got) != "one" {
		t.Fatalf("workspace holds %q, want one", got)
	}
	if head := servertest.Git(t, ws1, "rev-parse", "HEAD"); head != shas[0] {
		t.Fatalf("HEAD = %s, want %s", head, shas[0])
	}
	t.Logf("log: %s", log.String())
	if !strings.Contains(log.String(), "fetching "+shas[0]) {
		t.Fatalf("first checkout did not fetch: %s", log.String())
	}

	// The same commit again: no fetch, even with the source gone.
	log.Reset()
	ws2 := filepath.Join(t.TempDir(), "ws")
	if err := m.Checkout(ctx, Fetch{Repo: "alice/app", URL: "/nonexistent", SHA: shas[0]}, ws2, &log); err != nil {
		t.Fatalf("second checkout: %v\n%s", err, log.String())
	}
	if strings.Contains(log.String(), "fetching") {
		t.Fatalf("second checkout fetched again: %s", log.String())
	}

	// A newer commit is fetched by SHA, though no ref names it in the request.
	log.Reset()
	ws3 := filepath.Join(t.TempDir(), "ws")
	if err := m.Checkout(ctx, Fetch{Repo: "alice/app", URL: src, SHA: shas[1]}, ws3, &log); err != nil {
		t.Fatalf("third checkout: %v\n%s", err, log.String())
	}
	if got, _ := os.ReadFile(filepath.Join(ws3, "file.txt")); string(got) != "two" {
		t.Fatalf("workspace holds %q, want two", got)
	}
	mirror, _ := m.Path("alice/app")
	if _, err := os.Stat(filepath.Join(mirror, "HEAD")); err != nil {
		t.Fatalf("mirror not at %s: %v", mirror, err)
	}
}

func TestMirrors_UnknownCommitFailsWithGitMessage(t *testing.T) {
	src, _ := sourceRepo(t, "one")
	m := &Mirrors{Root: t.TempDir()}
	var log bytes.Buffer
	missing := strings.Repeat("ab", 20)
	err := m.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: src, SHA: missing}, filepath.Join(t.TempDir(), "ws"), &log)
	if err == nil {
		t.Fatal("checkout of a missing commit succeeded")
	}
	if !strings.Contains(log.String(), "fatal") && !strings.Contains(log.String(), "error") {
		t.Fatalf("git's complaint is not in the log: %q (err %v)", log.String(), err)
	}
}

func TestMirrors_RejectsBadRepoAndSHA(t *testing.T) {
	m := &Mirrors{Root: t.TempDir()}
	for _, f := range []Fetch{
		{Repo: "../x", SHA: strings.Repeat("a", 40)},
		{Repo: "a/../../b", SHA: strings.Repeat("a", 40)},
		{Repo: "alice/app", SHA: "main"},
		{Repo: "alice/app", SHA: "--upload-pack=evil"},
	} {
		if err := m.Checkout(context.Background(), f, filepath.Join(t.TempDir(), "ws"), &bytes.Buffer{}); err == nil {
			t.Errorf("checkout of %+v succeeded", f)
		}
	}
}

func TestMirrors_ConcurrentCheckoutsOfOneRepo(t *testing.T) {
	src, shas := sourceRepo(t, "one", "two", "three")
	m := &Mirrors{Root: t.TempDir()}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var log bytes.Buffer
			errs[i] = m.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: src, SHA: shas[i%3]}, filepath.Join(t.TempDir(), "ws"), &log)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("checkout %d: %v", i, err)
		}
	}
}

// BenchmarkMirrors_CheckoutOwnHistory checks this repository's HEAD out of a
// mirror that holds it already (the one fetch is not timed): what every run
// of a warm runner pays before its first step.
func BenchmarkMirrors_CheckoutOwnHistory(b *testing.B) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		testenv.Skipf(b, "not in a git checkout of this repository: %v", err)
	}
	sha, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		b.Fatal(err)
	}
	f := Fetch{Repo: "knotless/knotless", URL: strings.TrimSpace(string(top)), SHA: strings.TrimSpace(string(sha))}
	root := b.TempDir()
	m := &Mirrors{Root: filepath.Join(root, "mirrors")}
	if err := m.Checkout(context.Background(), f, filepath.Join(root, "first"), io.Discard); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		ws := filepath.Join(root, "ws"+strconv.Itoa(i))
		if err := m.Checkout(context.Background(), f, ws, io.Discard); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(ws); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// TestMirrors_WorkspaceIsSelfContainedAndHoldsNoCredential pins workspaces
// that borrowed the mirror's objects through alternates (a host path: no
// use in a container, broken when the mirror goes) and an origin that could
// carry a credential.
func TestMirrors_WorkspaceIsSelfContainedAndHoldsNoCredential(t *testing.T) {
	src, shas := sourceRepo(t, "one")
	root := t.TempDir()
	m := &Mirrors{Root: filepath.Join(root, "mirrors")}
	var log bytes.Buffer
	if err := m.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: src, SHA: shas[0], Token: "first-run-token"}, filepath.Join(root, "ws0"), &log); err != nil {
		t.Fatalf("checkout: %v\n%s", err, log.String())
	}
	// The commit is in the mirror now: no fetch, so the URL need not work.
	const token = "the-run-token"
	ws := filepath.Join(root, "ws")
	f := Fetch{Repo: "alice/app", URL: "https://knotless-run:url-secret@ci.example.com/alice/app.git", SHA: shas[0], Token: token}
	if err := m.Checkout(context.Background(), f, ws, &log); err != nil {
		t.Fatalf("checkout: %v\n%s", err, log.String())
	}
	if strings.Contains(log.String(), "warning") {
		t.Errorf("git warned:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "objects", "info", "alternates")); !os.IsNotExist(err) {
		t.Fatalf("workspace has objects/info/alternates (%v)", err)
	}
	if origin := servertest.Git(t, ws, "remote", "get-url", "origin"); origin != "https://ci.example.com/alice/app.git" {
		t.Errorf("origin %q, want the server's URL without credential", origin)
	}
	cfg, err := os.ReadFile(filepath.Join(ws, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	mirror, _ := m.Path("alice/app")
	for _, bad := range []string{token, "first-run-token", "url-secret", base64.StdEncoding.EncodeToString([]byte("knotless-run:" + token)), "extraHeader", "Authorization", mirror} {
		if strings.Contains(string(cfg), bad) {
			t.Errorf(".git/config holds %q:\n%s", bad, cfg)
		}
	}
	// Same file system: the object files are hard links, not copies.
	objects := 0
	err = filepath.WalkDir(filepath.Join(ws, ".git", "objects"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(filepath.Dir(p)) == "info" {
			return err
		}
		objects++
		if fi, err := os.Stat(p); err != nil || fi.Sys().(*syscall.Stat_t).Nlink < 2 {
			t.Errorf("%s is not a hard link (%v)", p, err)
		}
		return nil
	})
	if err != nil || objects == 0 {
		t.Fatalf("workspace objects: %d files, %v", objects, err)
	}

	if err := os.RemoveAll(m.Root); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", ws, "fsck", "--strict").CombinedOutput(); err != nil {
		t.Fatalf("git fsck after the mirror is gone: %v\n%s", err, out)
	}
	if head := servertest.Git(t, ws, "rev-parse", "HEAD"); head != shas[0] {
		t.Errorf("HEAD %s, want %s", head, shas[0])
	}
	if st := servertest.Git(t, ws, "status", "--porcelain"); st != "" {
		t.Errorf("workspace not clean after the mirror is gone:\n%s", st)
	}
}

// TestMirrors_CheckoutOnAnotherFileSystemCopiesObjects pins `git clone
// --local`, which dies when it cannot hard-link instead of copying.
func TestMirrors_CheckoutOnAnotherFileSystemCopiesObjects(t *testing.T) {
	base := t.TempDir()
	mirrors := testenv.OtherFileSystem(t, base)
	src, shas := sourceRepo(t, "one")
	m := &Mirrors{Root: mirrors}
	var log bytes.Buffer
	ws := filepath.Join(base, "ws")
	if err := m.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: src, SHA: shas[0]}, ws, &log); err != nil {
		t.Fatalf("checkout across file systems: %v\n%s", err, log.String())
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "file.txt")); string(got) != "one" {
		t.Fatalf("workspace holds %q", got)
	}
}

func TestWithoutCredential_TakesUserAndPasswordOutOfAnyURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://ci.example.com/alice/app.git":          "https://ci.example.com/alice/app.git",
		"https://u:secret@ci.example.com/alice/app.git": "https://ci.example.com/alice/app.git",
		"http://token@127.0.0.1:8080/a/b.git":           "http://127.0.0.1:8080/a/b.git",
		"https://u:bad%zz@ci.example.com/a/b.git":       "https://ci.example.com/a/b.git", // unparsable
		"/srv/git/app": "/srv/git/app",
	} {
		if got := withoutCredential(raw); got != want {
			t.Errorf("withoutCredential(%q) = %q, want %q", raw, got, want)
		}
	}
}

// TestMirrors_FetchOverHTTPInOneRequestKeepsPacks pins the fetch from a
// knotless server: one upload-pack request (no `git fetch`, whose fallback
// says so in the log), with the mirror's newest commits as haves, objects
// kept in packs (a workspace links a few files), the commit found again by
// its ref, in a pack's index and as a loose object.
func TestMirrors_FetchOverHTTPInOneRequestKeepsPacks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv := servertest.Start(t, servertest.Options{})
	token := srv.CreateAccount(t, "alice")
	srv.CreateRepo(t, token, "app")
	src := t.TempDir()
	servertest.Git(t, src, "init", "-q", "-b", "main")
	m := &Mirrors{Root: filepath.Join(t.TempDir(), "mirrors")}
	url := srv.URL + "/alice/app.git"
	for i, content := range []string{"one", "two", "three"} {
		sha := servertest.Commit(t, src, map[string]string{"file.txt": content}, content)
		srv.PushDir(t, src, "alice/app", token, "HEAD:refs/heads/main")
		var log bytes.Buffer
		ws := filepath.Join(t.TempDir(), "ws")
		if i == 2 {
			if err := os.Mkdir(ws, 0o755); err != nil { // made early, as for an executor that prepares early
				t.Fatal(err)
			}
		}
		if err := m.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: url, SHA: sha, Token: token}, ws, &log); err != nil {
			t.Fatalf("checkout %d: %v\n%s", i, err, log.String())
		}
		if strings.Contains(log.String(), "git fetch") || !strings.Contains(log.String(), "fetching "+sha) {
			t.Fatalf("checkout %d did not fetch in one request:\n%s", i, log.String())
		}
		if got, _ := os.ReadFile(filepath.Join(ws, "file.txt")); string(got) != content {
			t.Fatalf("checkout %d: workspace holds %q, want %q", i, got, content)
		}
		if st := servertest.Git(t, ws, "status", "--porcelain"); st != "" {
			t.Fatalf("checkout %d: workspace not clean:\n%s", i, st)
		}
		if out, err := exec.Command("git", "-C", ws, "fsck", "--strict").CombinedOutput(); err != nil {
			t.Fatalf("checkout %d: git fsck: %v\n%s", i, err, out)
		}
	}
	mirror, _ := m.Path("alice/app")
	loose, _ := filepath.Glob(filepath.Join(mirror, "objects", "??", "*"))
	packs, _ := filepath.Glob(filepath.Join(mirror, "objects", "pack", "pack-*.pack"))
	if len(loose) != 0 || len(packs) != 3 {
		t.Fatalf("mirror holds %d loose objects and %d packs, want 0 and 3", len(loose), len(packs))
	}
	first := servertest.Git(t, src, "rev-list", "--max-parents=0", "HEAD")
	tree := servertest.Git(t, src, "rev-parse", "HEAD^{tree}")
	if !hasObject(mirror, first) || !hasObject(mirror, tree) {
		t.Fatal("hasObject misses a commit and a tree the mirror's packs hold")
	}
	if hasObject(mirror, strings.Repeat("ab", 20)) {
		t.Fatal("hasObject finds an object nobody made")
	}
	// A loose object (what `git fetch` of a few objects leaves) is found too.
	blob := servertest.Git(t, mirror, "hash-object", "-w", "--stdin")
	if !hasObject(mirror, blob) {
		t.Fatalf("hasObject misses loose object %s", blob)
	}
}

func TestMirrors_PathTakesTheServersNameRuleAndStaysInsideRoot(t *testing.T) {
	m := &Mirrors{Root: t.TempDir()}
	for _, repo := range []string{"alice/app", "alice/a.b-c_d", "bob/x..y"} {
		p, err := m.Path(repo)
		if err != nil || api.CheckRepo(repo) != nil {
			t.Errorf("Path(%q) = %v; api.CheckRepo = %v; want both to accept it", repo, err, api.CheckRepo(repo))
			continue
		}
		if rel, err := filepath.Rel(m.Root, p); err != nil || !filepath.IsLocal(rel) {
			t.Errorf("Path(%q) = %s, outside %s", repo, p, m.Root)
		}
	}
	for _, repo := range []string{"../x", "alice/..", "alice/.x", "..%2f/x", "alice/x.git", "alice/a/b", "-x/app"} {
		if _, err := m.Path(repo); err == nil {
			t.Errorf("Path(%q) = nil error, want the name rule's", repo)
		}
	}
}
