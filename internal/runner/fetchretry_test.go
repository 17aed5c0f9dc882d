package runner

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"knotless.dev/knotless/internal/server/servertest"
)

// failingProxy is a reverse proxy to a servertest server that answers 502
// (as a proxy does when the server closed the connection it reused) to
// the requests fail picks, and counts the requests.
type failingProxy struct {
	fail      func(r *http.Request, n int64) bool // n: this request's number, from 1
	requests  atomic.Int64
	failed    atomic.Int64
	userAgent atomic.Value // of the last request that reached the server
}

func (p *failingProxy) handler(backend string) http.Handler {
	return servertest.Proxy(backend, func(w http.ResponseWriter, r *http.Request) bool {
		n := p.requests.Add(1)
		if p.fail(r, n) {
			p.failed.Add(1)
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return true
		}
		p.userAgent.Store(r.UserAgent())
		return false
	})
}

// pushedRepo starts a server with alice/app holding one commit and
// returns the server, alice's token and the commit.
func pushedRepo(t *testing.T) (*servertest.Server, string, string) {
	t.Helper()
	srv := servertest.Start(t, servertest.Options{})
	token := srv.CreateAccount(t, "alice")
	srv.CreateRepo(t, token, "app")
	src := t.TempDir()
	servertest.Git(t, src, "init", "-q", "-b", "main")
	sha := servertest.Commit(t, src, map[string]string{"file.txt": "content"}, "first")
	srv.PushDir(t, src, "alice/app", token, "HEAD:refs/heads/main")
	return srv, token, sha
}

// TestMirrors_CheckoutErroredWhenAProxyAnswered502Once pins the kind of
// CI's failure of TestDocs_OIDCGuideRunsAsWritten (run errored, reason
// checkout, 2 s after it started): one 502 of the proxy in front of the
// server made the one-request fetch fall back to `git fetch`. Now the
// fetch and the ref advertisement each try again after a 502 and the
// checkout never needs git fetch.
func TestMirrors_CheckoutErroredWhenAProxyAnswered502Once(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv, token, sha := pushedRepo(t)
	var packs, adverts atomic.Int64
	p := &failingProxy{fail: func(r *http.Request, _ int64) bool {
		// The first upload-pack POST and the first info/refs GET.
		switch {
		case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
			return packs.Add(1) == 1
		case strings.HasSuffix(r.URL.Path, "/info/refs"):
			return adverts.Add(1) == 1
		}
		return false
	}}
	front := httptest.NewServer(p.handler(srv.URL))
	t.Cleanup(front.Close)

	m := &Mirrors{Root: filepath.Join(t.TempDir(), "mirrors")}
	ws := filepath.Join(t.TempDir(), "ws")
	var log bytes.Buffer
	err := m.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: front.URL + "/alice/app.git", SHA: sha,
		Token: token, Ref: "refs/heads/main"}, ws, &log)
	if err != nil {
		t.Fatalf("checkout behind a proxy that answered 502 once: %v\n%s", err, log.String())
	}
	if p.failed.Load() != 2 || packs.Load() != 2 || adverts.Load() != 2 {
		t.Fatalf("the proxy answered 502 %d times to %d upload-pack and %d info/refs requests, want 2 to 2 and 2",
			p.failed.Load(), packs.Load(), adverts.Load())
	}
	if strings.Contains(log.String(), "git fetch") {
		t.Fatalf("a 502 made the checkout fall back to git fetch:\n%s", log.String())
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "file.txt")); string(got) != "content" {
		t.Fatalf("workspace holds %q, want content", got)
	}
	if got := servertest.Git(t, ws, "rev-parse", "origin/main"); got != sha {
		t.Fatalf("origin/main is %q, want %s", got, sha)
	}
}

// TestMirrors_GitFetchFallbackTrustsTheCAOfSSLCertFile pins the other
// half of that failure: the `git fetch` the checkout falls back to
// trusted only the system's CAs, while the runner's own requests trust
// SSL_CERT_FILE, so a server whose certificate a private CA signed could
// not be fetched from that way. Here every request of the runner's own
// (Go's user agent) is answered 502 three times over, so the commit
// arrives only by git fetch, over TLS, with SSL_CERT_FILE naming the CA.
func TestMirrors_GitFetchFallbackTrustsTheCAOfSSLCertFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv, token, sha := pushedRepo(t)
	p := &failingProxy{fail: func(r *http.Request, _ int64) bool {
		return strings.HasPrefix(r.UserAgent(), "Go-http-client/")
	}}
	front := httptest.NewTLSServer(p.handler(srv.URL))
	t.Cleanup(front.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)
	t.Setenv("GIT_SSL_CAINFO", "") // SSL_CERT_FILE alone; the cleanup puts back what was there
	os.Unsetenv("GIT_SSL_CAINFO")

	m := &Mirrors{Root: filepath.Join(t.TempDir(), "mirrors")}
	ws := filepath.Join(t.TempDir(), "ws")
	var log bytes.Buffer
	err := m.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: front.URL + "/alice/app.git", SHA: sha,
		Token: token}, ws, &log)
	if err != nil {
		t.Fatalf("checkout by git fetch from a server with a private CA named by SSL_CERT_FILE: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "trying git fetch") || p.failed.Load() == 0 {
		t.Fatalf("the commit did not come by git fetch (%d requests refused):\n%s", p.failed.Load(), log.String())
	}
	if ua, _ := p.userAgent.Load().(string); !strings.HasPrefix(ua, "git/") {
		t.Fatalf("the last request that reached the server came from %q, want git", ua)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "file.txt")); string(got) != "content" {
		t.Fatalf("workspace holds %q, want content", got)
	}
}
