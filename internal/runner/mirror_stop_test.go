package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

// TestMirrors_CheckoutStoppedAtAnyPointLeavesTheNextOneWorking pins CI's
// failure of TestDocs_ServerRunnerAndRunsGuidesRunAsWritten (the run's
// setup said "fetching ..." and nothing more for 5 minutes, in two runner
// processes one after the other): a runner process handed its run over
// while the setup ran `git init` of the mirror, which left HEAD and
// config.lock but no objects/; the next process took HEAD for a made
// mirror, its `git index-pack` ended at once, and the pack's writes waited
// for a reader forever. Here checkouts are stopped (their context
// cancelled) after 0, 3, 6 ... ms, each followed by one that must succeed.
func TestMirrors_CheckoutStoppedAtAnyPointLeavesTheNextOneWorking(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv, token, sha := pushedRepo(t)
	f := Fetch{Repo: "alice/app", URL: srv.URL + "/alice/app.git", SHA: sha, Token: token}
	stopped := 0
	for d := time.Duration(0); d < 90*time.Millisecond; d += 3 * time.Millisecond {
		m := &Mirrors{Root: filepath.Join(t.TempDir(), "mirrors")}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		if m.Checkout(ctx, f, filepath.Join(t.TempDir(), "ws"), io.Discard) != nil {
			stopped++
		}
		cancel()
		var log bytes.Buffer
		ws := filepath.Join(t.TempDir(), "ws")
		if err := checkoutWithin(t, m, f, ws, &log); err != nil {
			t.Fatalf("the checkout after one stopped at %v: %v\n%s", d, err, log.String())
		}
		if got, _ := os.ReadFile(filepath.Join(ws, "file.txt")); string(got) != "content" {
			t.Fatalf("the checkout after one stopped at %v: workspace holds %q, want content", d, got)
		}
		left, _ := filepath.Glob(filepath.Join(m.Root, "alice", ".app.git.making-*"))
		if len(left) > 0 {
			t.Fatalf("a made mirror left %v behind", left)
		}
	}
	if stopped == 0 {
		t.Fatal("no checkout was stopped on its way: this test no longer stops one in the middle")
	}
	t.Logf("%d of 30 checkouts stopped on their way", stopped)
}

// TestMirrors_HalfMadeMirrorOfAnEarlierProcessIsMadeAgain pins the state
// that failure left on runners of earlier versions (a mirror made in
// place): HEAD and config.lock, nothing else. The checkout makes the
// mirror again rather than hang or fail.
func TestMirrors_HalfMadeMirrorOfAnEarlierProcessIsMadeAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv, token, sha := pushedRepo(t)
	m := &Mirrors{Root: filepath.Join(t.TempDir(), "mirrors")}
	mirror, err := m.Path("alice/app")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"refs/heads", "refs/tags", "info"} {
		if err := os.MkdirAll(filepath.Join(mirror, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"HEAD": "ref: refs/heads/master\n", "config.lock": "[core]\n"} {
		if err := os.WriteFile(filepath.Join(mirror, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var log bytes.Buffer
	ws := filepath.Join(t.TempDir(), "ws")
	if err := checkoutWithin(t, m, Fetch{Repo: "alice/app", URL: srv.URL + "/alice/app.git", SHA: sha, Token: token}, ws, &log); err != nil {
		t.Fatalf("checkout with a half-made mirror: %v\n%s", err, log.String())
	}
	if strings.Contains(log.String(), "git fetch") {
		t.Fatalf("the one-request fetch failed into the half-made mirror:\n%s", log.String())
	}
}

// TestFetchPack_IndexPackThatEndsEarlyFailsTheFetchWithItsWords pins the
// other half of that failure: with `git index-pack` gone (here the mirror
// is no repository at all), the pack's writes waited for a reader forever.
// Now they fail and the error is index-pack's.
func TestFetchPack_IndexPackThatEndsEarlyFailsTheFetchWithItsWords(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv, token, _ := pushedRepo(t)
	src := t.TempDir()
	servertest.Git(t, src, "init", "-q", "-b", "main")
	files := map[string]string{}
	for i := range 200 { // a pack of many side-band packets: the second write is the one that waited
		files[fmt.Sprintf("f%03d.bin", i)] = strings.Repeat(fmt.Sprintf("%d-", i), 2000)
	}
	sha := servertest.Commit(t, src, files, "many files")
	srv.PushDir(t, src, "alice/app", token, "+HEAD:refs/heads/big")
	notARepo := t.TempDir()
	done := make(chan error, 1)
	go func() { done <- fetchPack(context.Background(), notARepo, srv.URL+"/alice/app.git", sha, token) }()
	err := testwait.Receive(t, done, 2*time.Minute, "the fetch's end after git index-pack ended")
	if err == nil || !strings.Contains(err.Error(), "git index-pack") || !strings.Contains(err.Error(), "requires a git repository") {
		t.Fatalf("fetch into no repository: %v; want git index-pack's words", err)
	}
}

// checkoutWithin is m.Checkout that fails the test when it has not ended
// after 2 minutes (a checkout takes well under a second here).
func checkoutWithin(t *testing.T, m *Mirrors, f Fetch, ws string, log *bytes.Buffer) error {
	t.Helper()
	var buf syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- m.Checkout(context.Background(), f, ws, &buf) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the checkout's log so far:\n%s", buf.String())
		}
	})
	err := testwait.Receive(t, done, 2*time.Minute, "the checkout's end")
	log.WriteString(buf.String())
	return err
}
