package runner

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// busyProxy is a reverse proxy to a real server that answers the first
// busy registrations itself with 503 ServerBusy (the server's answer when
// its database's writes kept colliding), and counts every registration.
func busyProxy(t *testing.T, target string, busy int32) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/"+api.MethodRegisterRunner) && calls.Add(1) <= busy {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"ServerBusy","message":"the server is busy (its database's writes kept colliding); retry in 5 s"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// busyServer starts a real server with alice's repository alice/app and
// busyProxy in front of it, answering the first busy registrations 503;
// it returns the server, alice's token, the proxy and its count.
func busyServer(t *testing.T, busy int32) (*servertest.Server, string, *httptest.Server, *atomic.Int32) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts a server")
	}
	srv := servertest.Start(t, servertest.Options{})
	token := srv.CreateAccount(t, "alice")
	srv.CreateRepo(t, token, "app")
	proxy, calls := busyProxy(t, srv.URL, busy)
	return srv, token, proxy, calls
}

// A registration the server answered 503 ServerBusy is sent again. Before,
// `knotless-run login` exited 1 at the first such answer ("register runner
// NAME for REPO: ServerBusy: ...; retry in 5 s") when thousands of runners
// registered at once on two PostgreSQL replicas, though the server had
// done nothing and asked to be asked again.
func TestLogin_ARegistrationTheServerWasTooBusyForIsSentAgainAndRegisters(t *testing.T) {
	srv, token, proxy, calls := busyServer(t, 2)
	state := filepath.Join(t.TempDir(), "runner.json")
	st, err := Login(context.Background(), LoginOptions{Server: proxy.URL, Repo: "alice/app", Name: "r1", State: state, Token: srv.AdminToken})
	if err != nil {
		t.Fatalf("login through two busy answers: %v", err)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("registrations sent: %d, want 3 (two answered busy, then the server's)", got)
	}
	var runners api.ListRunnersOutput
	if err := srv.Client(token).Query(context.Background(), api.MethodListRunners, url.Values{"repo": {"alice/app"}}, &runners); err != nil {
		t.Fatal(err)
	}
	if len(runners.Runners) != 1 || runners.Runners[0].DID != st.DID {
		t.Errorf("runners of alice/app: %+v, want the one with DID %s", runners.Runners, st.DID)
	}
}

// A server that stays busy gets LoginAttempts registrations, then Login
// returns its answer: no endless retry, and the error says what the
// server said.
func TestLogin_AServerThatStaysBusyGetsLoginAttemptsAndItsAnswerIsTheError(t *testing.T) {
	srv, _, proxy, calls := busyServer(t, 1000)
	_, err := Login(context.Background(), LoginOptions{Server: proxy.URL, Repo: "alice/app", Name: "r1", State: filepath.Join(t.TempDir(), "runner.json"), Token: srv.AdminToken})
	if err == nil || !api.IsError(err, api.ErrServerBusy) || !strings.Contains(err.Error(), "register runner r1 for alice/app") {
		t.Fatalf("login against a busy server: %v, want the server's ServerBusy for r1", err)
	}
	if got := calls.Load(); got != LoginAttempts {
		t.Errorf("registrations sent: %d, want %d", got, LoginAttempts)
	}
}
