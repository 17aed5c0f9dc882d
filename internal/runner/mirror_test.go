package runner

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"knotless.dev/knotless/internal/server/servertest"
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
		b.Skip("not in a git checkout")
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
