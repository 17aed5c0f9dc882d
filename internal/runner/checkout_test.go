package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/workflow"
)

// taggedRepo makes main: one, two (annotated tag v1.0.0), three (tag
// v9.9.9), and branch feature off two: four. It returns the path and the
// SHAs by message.
func taggedRepo(t *testing.T) (string, map[string]string) {
	t.Helper()
	src, shas := sourceRepo(t, "one", "two")
	sha := map[string]string{"one": shas[0], "two": shas[1]}
	servertest.Git(t, src, "tag", "-a", "-m", "release 1.0.0", "v1.0.0", sha["two"])
	sha["three"] = servertest.Commit(t, src, map[string]string{"file.txt": "three"}, "three")
	servertest.Git(t, src, "tag", "v9.9.9", sha["three"])
	servertest.Git(t, src, "checkout", "-q", "-b", "feature", sha["two"])
	sha["four"] = servertest.Commit(t, src, map[string]string{"file.txt": "four"}, "four")
	servertest.Git(t, src, "checkout", "-q", "main")
	return src, sha
}

func checkoutOf(t *testing.T, m *Mirrors, f Fetch) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	var log bytes.Buffer
	if err := m.Checkout(context.Background(), f, ws, &log); err != nil {
		t.Fatalf("checkout of %s at %s: %v\n%s", f.Ref, f.SHA, err, log.String())
	}
	return ws
}

func TestCheckout_TagRunCanDescribeItsTag(t *testing.T) {
	src, sha := taggedRepo(t)
	m := &Mirrors{Root: t.TempDir()}
	ws := checkoutOf(t, m, Fetch{Repo: "alice/app", URL: src, SHA: sha["three"], Ref: "refs/tags/v9.9.9", Checkout: workflow.DefaultCheckout})
	if got := servertest.Git(t, ws, "describe", "--tags"); got != "v9.9.9" {
		t.Errorf("git describe --tags = %q, want v9.9.9", got)
	}
	if got := servertest.Git(t, ws, "describe"); got != "v1.0.0-1-g"+sha["three"][:7] {
		t.Errorf("git describe (annotated tags only) = %q", got)
	}
	if got := servertest.Git(t, ws, "rev-parse", "--abbrev-ref", "HEAD"); got != "HEAD" {
		t.Errorf("HEAD of a tag run is %q, want detached", got)
	}
	if got := servertest.Git(t, ws, "rev-list", "--count", "HEAD"); got != "3" {
		t.Errorf("history holds %s commits, want 3", got)
	}
	// Without tags: only the run's own tag.
	ws = checkoutOf(t, m, Fetch{Repo: "alice/app", URL: src, SHA: sha["three"], Ref: "refs/tags/v9.9.9"})
	if got := servertest.Git(t, ws, "tag"); got != "v9.9.9" {
		t.Errorf("tags: false: git tag = %q, want only v9.9.9", got)
	}
}

func TestCheckout_BranchRunIsOnItsBranchWithOriginBranches(t *testing.T) {
	src, sha := taggedRepo(t)
	m := &Mirrors{Root: t.TempDir()}
	ws := checkoutOf(t, m, Fetch{Repo: "alice/app", URL: "file://" + src, SHA: sha["four"], Ref: "refs/heads/feature", Checkout: workflow.DefaultCheckout})
	if got := servertest.Git(t, ws, "rev-parse", "--abbrev-ref", "HEAD"); got != "feature" {
		t.Errorf("git rev-parse --abbrev-ref HEAD = %q, want feature", got)
	}
	if got := servertest.Git(t, ws, "log", "--format=%s", "origin/main.."); got != "four" {
		t.Errorf("git log origin/main.. = %q, want four", got)
	}
	if got := servertest.Git(t, ws, "rev-parse", "--abbrev-ref", "@{upstream}"); got != "origin/feature" {
		t.Errorf("upstream = %q, want origin/feature", got)
	}
	if got := servertest.Git(t, ws, "describe", "--tags"); got != "v1.0.0-1-g"+sha["four"][:7] {
		t.Errorf("git describe --tags = %q", got)
	}
	if got := servertest.Git(t, ws, "status", "--porcelain"); got != "" {
		t.Errorf("git status: %q, want clean", got)
	}
	if got := servertest.Git(t, ws, "fsck", "--connectivity-only"); strings.Contains(got, "missing") {
		t.Errorf("fsck: %s", got)
	}
	// A branch name with non-ASCII letters and a quote tracks its origin too.
	servertest.Git(t, src, "branch", `café"x`, sha["four"])
	ws = checkoutOf(t, m, Fetch{Repo: "alice/app", URL: "file://" + src, SHA: sha["four"], Ref: `refs/heads/café"x`, Checkout: workflow.DefaultCheckout})
	if got := servertest.Git(t, ws, "rev-parse", "--abbrev-ref", "@{upstream}"); got != `origin/café"x` {
		t.Errorf("upstream of café\"x = %q", got)
	}
	// A branch deleted on the server goes from origin/*.
	servertest.Git(t, src, "branch", "-D", "feature")
	ws = checkoutOf(t, m, Fetch{Repo: "alice/app", URL: "file://" + src, SHA: sha["three"], Ref: "refs/heads/main", Checkout: workflow.DefaultCheckout})
	if got := servertest.Git(t, ws, "branch", "-r"); strings.Contains(got, "feature") {
		t.Errorf("git branch -r = %q: the deleted branch is still there", got)
	}
}

func TestCheckout_DepthMakesAShallowCheckout(t *testing.T) {
	src, sha := taggedRepo(t)
	m := &Mirrors{Root: t.TempDir()}
	ws := checkoutOf(t, m, Fetch{Repo: "alice/app", URL: src, SHA: sha["three"], Ref: "refs/heads/main",
		Checkout: workflow.Checkout{Depth: 1, Tags: true}})
	if got := servertest.Git(t, ws, "rev-parse", "--is-shallow-repository"); got != "true" {
		t.Errorf("depth 1: shallow = %s", got)
	}
	if got := servertest.Git(t, ws, "rev-list", "--count", "HEAD"); got != "1" {
		t.Errorf("depth 1: %s commits, want 1", got)
	}
	if got := servertest.Git(t, ws, "describe", "--tags"); got != "v9.9.9" {
		t.Errorf("depth 1: git describe --tags = %q, want v9.9.9 (the tag on the commit)", got)
	}
	if got := servertest.Git(t, ws, "rev-parse", "--abbrev-ref", "HEAD"); got != "main" {
		t.Errorf("depth 1: HEAD on %q, want main", got)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "file.txt")); string(got) != "three" {
		t.Errorf("depth 1: file.txt = %q", got)
	}
}

// addSubmodule records commit sha of url at path in repository dir's next
// commit, as `git submodule add` does, without fetching anything.
func addSubmodule(t *testing.T, dir, path, url, sha string) string {
	t.Helper()
	servertest.Git(t, dir, "config", "--file", ".gitmodules", "submodule."+path+".path", path)
	servertest.Git(t, dir, "config", "--file", ".gitmodules", "submodule."+path+".url", url)
	servertest.Git(t, dir, "add", ".gitmodules")
	servertest.Git(t, dir, "update-index", "--add", "--cacheinfo", "160000,"+sha+","+path)
	servertest.Git(t, dir, "commit", "-q", "-m", "add "+path)
	return servertest.Git(t, dir, "rev-parse", "HEAD")
}

func TestCheckout_SubmodulesWithRelativeURLsAreCheckedOut(t *testing.T) {
	root := t.TempDir()
	repo := func(name, content string) (string, string) {
		dir := filepath.Join(root, name)
		servertest.Git(t, root, "init", "-q", "-b", "main", dir)
		servertest.Git(t, dir, "config", "uploadpack.allowAnySHA1InWant", "true")
		return dir, servertest.Commit(t, dir, map[string]string{name + ".txt": content}, name)
	}
	deep, deepSHA := repo("deep", "deep\n")
	lib, _ := repo("lib", "lib\n")
	libSHA := addSubmodule(t, lib, "vendor/deep", "../deep", deepSHA)
	app, _ := repo("app", "app\n")
	appSHA := addSubmodule(t, app, "lib", "../lib", libSHA)
	_ = deep

	m := &Mirrors{Root: t.TempDir()}
	// Submodules off (the default): the directory stays empty.
	ws := checkoutOf(t, m, Fetch{Repo: "alice/app", URL: app, SHA: appSHA, Ref: "refs/heads/main", Checkout: workflow.DefaultCheckout})
	if ents, _ := os.ReadDir(filepath.Join(ws, "lib")); len(ents) != 0 {
		t.Errorf("submodules: false: lib holds %d entries", len(ents))
	}
	// true: the top level only.
	ws = checkoutOf(t, m, Fetch{Repo: "alice/app", URL: app, SHA: appSHA, Ref: "refs/heads/main",
		Checkout: workflow.Checkout{Tags: true, Submodules: workflow.SubmodulesTop}})
	if got, _ := os.ReadFile(filepath.Join(ws, "lib", "lib.txt")); string(got) != "lib\n" {
		t.Errorf("submodules: true: lib/lib.txt = %q", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "lib", "vendor", "deep", "deep.txt")); err == nil {
		t.Errorf("submodules: true checked out a nested submodule")
	}
	// recursive: nested ones too, and git sees them as checked out.
	ws = checkoutOf(t, m, Fetch{Repo: "alice/app", URL: app, SHA: appSHA, Ref: "refs/heads/main",
		Checkout: workflow.Checkout{Tags: true, Submodules: workflow.SubmodulesRecursive}})
	if got, _ := os.ReadFile(filepath.Join(ws, "lib", "vendor", "deep", "deep.txt")); string(got) != "deep\n" {
		t.Errorf("submodules: recursive: lib/vendor/deep/deep.txt = %q", got)
	}
	status := servertest.Git(t, ws, "submodule", "status", "--recursive")
	if !strings.Contains(status, libSHA+" lib (") || !strings.Contains(status, " "+deepSHA+" lib/vendor/deep") ||
		strings.Contains("\n"+status, "\n-") || strings.Contains("\n"+status, "\n+") {
		t.Errorf("git submodule status --recursive:\n%s", status)
	}
	if got := servertest.Git(t, ws, "status", "--porcelain"); got != "" {
		t.Errorf("git status: %q, want clean", got)
	}
}

// httpRepo pushes a repository with 200 files and 20 tagged commits
// (v0.0 ... v0.19, lightweight, v0.19 on HEAD) to a real server and
// claims its run: it returns the repository's URL, HEAD, the run token and
// the owner's token (which outlives the run's lease, for benchmarks).
func httpRepo(t testing.TB) (url, sha, token, ownerToken string) {
	srv := servertest.Start(t, servertest.Options{})
	owner := srv.CreateAccount(t, "alice")
	srv.CreateRepo(t, owner, "app")
	files := map[string]string{".knotless/workflows/ci.yml": "on:\n  push: {}\nsteps:\n  - run: echo hello\n"}
	for i := range 200 {
		files[fmt.Sprintf("src/f%03d.go", i)] = strings.Repeat("package src\n", 50)
	}
	src := servertest.WorkTree(t, files)
	for i := range 20 {
		servertest.Commit(t, src, map[string]string{"v.txt": strconv.Itoa(i)}, "c"+strconv.Itoa(i))
		servertest.Git(t, src, "tag", "v0."+strconv.Itoa(i))
	}
	servertest.Git(t, src, "branch", "other", "HEAD~3")
	sha = servertest.Git(t, src, "rev-parse", "HEAD")
	srv.PushDir(t, src, "alice/app", owner, "HEAD:refs/heads/main", "other:refs/heads/other", "refs/tags/*:refs/tags/*")
	r := srv.RegisterRunner(t, "alice/app", "r1", nil, true)
	var out api.ClaimOutput
	if err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{}, &out); err != nil || out.Run == nil {
		t.Fatalf("claim: %v", err)
	}
	return srv.URL + "/alice/app.git", sha, out.Run.RunToken, owner
}

func TestCheckout_OverHTTPBranchesTagsAndDepthComeFromTheServersRefs(t *testing.T) {
	url, sha, token, _ := httpRepo(t)
	m := &Mirrors{Root: t.TempDir()}
	ws := checkoutOf(t, m, Fetch{Repo: "alice/app", URL: url, SHA: sha, Token: token, Ref: "refs/heads/main", Checkout: workflow.DefaultCheckout})
	if got := servertest.Git(t, ws, "describe", "--tags"); got != "v0.19" {
		t.Errorf("git describe --tags = %q, want v0.19", got)
	}
	if got := servertest.Git(t, ws, "rev-list", "--count", "origin/other..HEAD"); got != "3" {
		t.Errorf("origin/other..HEAD has %s commits, want 3", got)
	}
	if got := servertest.Git(t, ws, "rev-parse", "--abbrev-ref", "HEAD"); got != "main" {
		t.Errorf("HEAD on %q, want main", got)
	}
	if got := servertest.Git(t, ws, "fsck", "--connectivity-only", "--no-dangling"); got != "" {
		t.Errorf("fsck: %s", got)
	}
	// Shallow: one commit and its tag.
	ws = checkoutOf(t, m, Fetch{Repo: "alice/app", URL: url, SHA: sha, Token: token, Ref: "refs/heads/main", Checkout: workflow.Checkout{Depth: 1, Tags: true}})
	if got := servertest.Git(t, ws, "rev-list", "--count", "HEAD"); got != "1" {
		t.Errorf("depth 1: %s commits", got)
	}
	if got := servertest.Git(t, ws, "describe", "--tags"); got != "v0.19" {
		t.Errorf("depth 1: git describe --tags = %q, want v0.19", got)
	}
	if got := servertest.Git(t, ws, "tag"); got != "v0.19" {
		t.Errorf("depth 1: git tag = %q, want only the tag within the history", got)
	}
}

// BenchmarkMirrors_CheckoutOverHTTP measures a run's checkout of a commit
// the mirror has already, against a real server: detached with no ref (as
// before checkouts held branches and tags) and as runs now check out (the
// branch, origin/*, every tag: one more `git fetch` of the refs).
func BenchmarkMirrors_CheckoutOverHTTP(b *testing.B) {
	url, sha, _, token := httpRepo(b)
	for _, bc := range []struct {
		name string
		f    Fetch
	}{
		{"Detached", Fetch{Repo: "alice/app", URL: url, SHA: sha, Token: token}},
		{"BranchAndTags", Fetch{Repo: "alice/app", URL: url, SHA: sha, Token: token, Ref: "refs/heads/main", Checkout: workflow.DefaultCheckout}},
		{"Depth1", Fetch{Repo: "alice/app", URL: url, SHA: sha, Token: token, Ref: "refs/heads/main", Checkout: workflow.Checkout{Depth: 1, Tags: true}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := &Mirrors{Root: filepath.Join(b.TempDir(), "mirrors")}
			root := b.TempDir()
			if err := m.Checkout(context.Background(), bc.f, filepath.Join(root, "warm"), io.Discard); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := m.Checkout(context.Background(), bc.f, filepath.Join(root, strconv.Itoa(i)), io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestSubmoduleFetch_ResolvesURLsAndSendsTheTokenOnlyToTheSameServer(t *testing.T) {
	m := &Mirrors{Root: "/m"}
	f := Fetch{Repo: "alice/app", URL: "https://ci.example.com/knotless/alice/app.git", Token: "knr_x",
		Checkout: workflow.Checkout{Submodules: workflow.SubmodulesRecursive}}
	for _, tc := range []struct{ url, wantURL, wantRepo, wantToken string }{
		{"../lib.git", "https://ci.example.com/knotless/alice/lib.git", "alice/lib", "knr_x"},
		{"../../bob/lib.git", "https://ci.example.com/knotless/bob/lib.git", "bob/lib", "knr_x"}, // the server says no
		{"./vendor/x.git", "https://ci.example.com/knotless/alice/app.git/vendor/x.git", "", ""},
		{"https://ci.example.com/knotless/alice/tools.git", "https://ci.example.com/knotless/alice/tools.git", "alice/tools", "knr_x"},
		{"https://github.com/org/lib.git", "https://github.com/org/lib.git", "", ""},
		{"https://ci.example.com.evil.net/knotless/alice/lib.git", "https://ci.example.com.evil.net/knotless/alice/lib.git", "", ""},
		{"https://user:pw@ci.example.com/knotless/alice/lib.git", "https://ci.example.com/knotless/alice/lib.git", "alice/lib", "knr_x"},
	} {
		got, err := m.submoduleFetch(f, submodule{name: "s", path: "s", url: tc.url, sha: strings.Repeat("a", 40)})
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if withoutCredential(got.URL) != tc.wantURL || got.Token != tc.wantToken || (tc.wantRepo != "" && got.Repo != tc.wantRepo) {
			t.Errorf("%s: URL %s repo %s token %q; want %s %s %q", tc.url, got.URL, got.Repo, got.Token, tc.wantURL, tc.wantRepo, tc.wantToken)
		}
		if tc.wantToken == "" && (got.mirror == "" || !strings.HasPrefix(got.mirror, "/m/.external/")) {
			t.Errorf("%s: mirror %q, want one under /m/.external", tc.url, got.mirror)
		}
		if got.Checkout.Submodules != workflow.SubmodulesRecursive {
			t.Errorf("%s: nested submodules setting lost", tc.url)
		}
	}
	if _, err := m.submoduleFetch(f, submodule{url: "--upload-pack=touch /tmp/x"}); err == nil {
		t.Errorf("a URL that is an option was taken")
	}
}
