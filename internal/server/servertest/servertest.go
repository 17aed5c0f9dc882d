// Package servertest runs a real knotless-server for tests of other parts
// (runner, CLI): a temporary data directory, a loopback listener, real
// SQLite and git. It never mocks anything and is only for tests.
package servertest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/postgres"
	"knotless.dev/knotless/internal/store/sqlite"
	"knotless.dev/knotless/internal/svcauth"
)

// Options configure Start. Zero values take defaults.
type Options struct {
	// DataDir is the data directory; default a fresh t.TempDir().
	DataDir string
	// Lease is the run lease; default server.DefaultLease (30 s). Tests of
	// lost runners use something short, like 1 s.
	Lease time.Duration
	// HandoverGrace is how long handed-over runs wait for the runner's
	// next session; default server.DefaultHandoverGrace (5 min).
	HandoverGrace time.Duration
	// Logger receives the server's log; default: lines go to t.Log (shown
	// for failing tests or with -v) until the test ends.
	Logger *slog.Logger
	// Limits bound connections and slow clients; zero fields take
	// server.Default* values.
	Limits server.Limits
	// ClientLimits are the server's limits on what one client may make it
	// hold; zero fields take the defaults.
	ClientLimits server.ClientLimits
	// MaxPushSize, MaxFetchRequest and RepoQuota are the git limits of
	// server.Config; default theirs.
	MaxPushSize, MaxFetchRequest, RepoQuota int64
	// MaxOutputsSize is server.Config's; default theirs.
	MaxOutputsSize int64
	// Clock is the server's clock (server.Config.Now); default the real
	// one. Tests of expiry move it forward instead of sleeping.
	Clock *Clock
	// ReleaseDir is server.Config's: release files served at
	// server.DownloadPath; default none.
	ReleaseDir string
	// Schedules are server.Config's settings of scheduled runs; zero
	// fields take the defaults.
	Schedules server.Schedules
	// Database chooses the store Start opens and hands the server
	// (OpenStore): "" for SQLite in DataDir, or a PostgreSQL URL (pgtest).
	// Two servers with one Database and one DataDir are two replicas.
	Database string
}

// Server is a running test server.
type Server struct {
	*server.Server
	// URL is the base URL, e.g. "http://127.0.0.1:43567".
	URL string
	// Addr is the listener's host:port (kept across Restart).
	Addr string
	// DataDir is the data directory (kept across Restart).
	DataDir string
	// AdminToken is the API token of the "admin" account.
	AdminToken string

	t      testing.TB
	opts   Options
	store  store.Store // the running server's, closed by Stop
	logw   *testWriter
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// Start runs a server until the test ends (Stop is registered with
// t.Cleanup).
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	s := &Server{t: t, opts: opts, DataDir: opts.DataDir, logw: &testWriter{t: t}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("servertest: listen: %v", err)
	}
	s.Addr = ln.Addr().String()
	s.URL = "http://" + s.Addr
	s.start(ln)
	t.Cleanup(func() {
		s.Stop()
		s.logw.stop()
	})
	return s
}

func (s *Server) start(ln net.Listener) {
	t := s.t
	t.Helper()
	logger := s.opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(s.logw, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	limits := s.opts.ClientLimits
	if limits.RegistrationsPerMinute == 0 {
		limits.RegistrationsPerMinute = 1 << 20 // tests register many runners from one address
	}
	st, err := openStore(s.DataDir, s.opts.Database)
	if err != nil {
		ln.Close()
		t.Fatalf("servertest: open store: %v", err)
	}
	srv, err := server.New(context.Background(), server.Config{
		DataDir: s.DataDir, Listen: s.Addr, URL: s.URL, Lease: s.opts.Lease, HandoverGrace: s.opts.HandoverGrace,
		Logger: logger, Limits: s.opts.Limits, ClientLimits: limits,
		MaxPushSize: s.opts.MaxPushSize, MaxFetchRequest: s.opts.MaxFetchRequest, RepoQuota: s.opts.RepoQuota,
		MaxOutputsSize: s.opts.MaxOutputsSize, ReleaseDir: s.opts.ReleaseDir, Store: st, Now: s.opts.Clock.now(),
		Schedules: s.opts.Schedules,
	})
	if err != nil {
		st.Close()
		ln.Close()
		t.Fatalf("servertest: start server: %v", err)
	}
	tok, err := os.ReadFile(filepath.Join(s.DataDir, server.AdminTokenFile))
	if err != nil {
		ln.Close()
		srv.Close()
		st.Close()
		t.Fatalf("servertest: read admin token: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	s.mu.Lock()
	s.Server, s.store, s.AdminToken, s.cancel, s.done = srv, st, strings.TrimSpace(string(tok)), cancel, done
	s.mu.Unlock()
}

// Stop shuts the server down gracefully and closes its database. It is
// idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	cancel, done, srv, st := s.cancel, s.done, s.Server, s.store
	s.cancel = nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	if err := <-done; err != nil {
		s.t.Errorf("servertest: serve: %v", err)
	}
	if err := srv.Close(); err != nil {
		s.t.Errorf("servertest: close: %v", err)
	}
	if err := st.Close(); err != nil {
		s.t.Errorf("servertest: close store: %v", err)
	}
	// Clients made by Client use the default transport: drop its idle
	// connections to the stopped server, or the first request after a
	// Restart may be sent on one the server already closed (EOF).
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// OpenStore opens the store a server on dataDir is handed, as
// knotless-server chooses it: database "" is SQLite in
// dataDir/server.DBFile (made, 0700, if missing), else the PostgreSQL
// database at that URL (pgtest). It is closed when the test ends; close
// the server first.
func OpenStore(t testing.TB, dataDir, database string) store.Store {
	t.Helper()
	st, err := openStore(dataDir, database)
	if err != nil {
		t.Fatalf("servertest: open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openStore(dataDir, database string) (store.Store, error) {
	if database != "" {
		return postgres.Open(context.Background(), database)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	return sqlite.Open(context.Background(), filepath.Join(dataDir, server.DBFile))
}

// Restart stops the server and starts a new one on the same data directory
// and address, as an operator restarting knotless-server would.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var ln net.Listener
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err = net.Listen("tcp", s.Addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the old socket is being released
	}
	if err != nil {
		s.t.Fatalf("servertest: listen again on %s: %v", s.Addr, err)
	}
	s.start(ln)
}

// Client returns an XRPC client sending token (an account API token) as the
// bearer token.
func (s *Server) Client(token string) *api.Client {
	return &api.Client{BaseURL: s.URL, Auth: api.BearerToken(token)}
}

// Admin returns a client of the admin account.
func (s *Server) Admin() *api.Client { return s.Client(s.AdminToken) }

// CreateAccount makes an account and returns its API token.
func (s *Server) CreateAccount(t testing.TB, handle string) string {
	t.Helper()
	var out api.CreateAccountOutput
	if err := s.Admin().Procedure(context.Background(), api.MethodCreateAccount,
		api.CreateAccountInput{Handle: handle}, &out); err != nil {
		t.Fatalf("servertest: create account %s: %v", handle, err)
	}
	return out.Token
}

// CreateRepo makes repository repo ("NAME" under the token's account, or
// "OWNER/NAME") with the given account token.
func (s *Server) CreateRepo(t testing.TB, token, repo string) api.Repo {
	t.Helper()
	var out api.Repo
	if err := s.Client(token).Procedure(context.Background(), api.MethodCreateRepo,
		api.CreateRepoInput{Repo: repo}, &out); err != nil {
		t.Fatalf("servertest: create repo %s: %v", repo, err)
	}
	return out
}

// GitURL returns the clone URL of "OWNER/NAME" with token as the basic-auth
// password.
func (s *Server) GitURL(repo, token string) string {
	u, _ := url.Parse(s.URL)
	u.User = url.UserPassword("x", token)
	u.Path = "/" + repo + ".git"
	return u.String()
}

// Runner is a registered runner identity for tests.
type Runner struct {
	Name   string
	Repo   string
	DID    string
	Signer *svcauth.Signer
	// Client calls runner methods with a fresh service-auth JWT per request
	// and, once StartSession ran, the runner's session (api.SessionHeader).
	Client *api.Client

	url     string
	mu      sync.Mutex
	session string
}

// StartSession starts a new session of the runner (superseding any
// earlier one) and makes Client send it from then on.
func (r *Runner) StartSession(t testing.TB) api.StartSessionOutput {
	t.Helper()
	return r.StartSessionAs(t, "none")
}

// StartSessionAs is StartSession of a runner process that says it runs
// executor (shell, docker, kube).
func (r *Runner) StartSessionAs(t testing.TB, executor string) api.StartSessionOutput {
	t.Helper()
	var out api.StartSessionOutput
	if err := r.Client.Procedure(context.Background(), api.MethodStartSession,
		api.StartSessionInput{Version: "test", Executor: executor}, &out); err != nil {
		t.Fatalf("servertest: start session of runner %s: %v", r.Name, err)
	}
	r.mu.Lock()
	r.session = out.Session
	r.mu.Unlock()
	return out
}

// Session returns the session Client sends ("" before StartSession).
func (r *Runner) Session() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.session
}

// ClientWithSession returns a client of the runner's identity that sends
// session ("" sends none), e.g. one a later StartSession superseded.
func (r *Runner) ClientWithSession(session string) *api.Client {
	return &api.Client{BaseURL: r.url, Auth: sessionAuth(r.Signer.AuthFunc(), func() string { return session })}
}

// RegistrationAuth adds the registration credential cred (a registration
// token, or an API token of an account that may manage the repository) to
// auth's.
func RegistrationAuth(auth api.AuthFunc, cred string) api.AuthFunc {
	return func(req *http.Request, nsid string) error {
		req.Header.Set(api.RegistrationTokenHeader, cred)
		return auth(req, nsid)
	}
}

// sessionAuth adds the session session returns to auth's credentials.
func sessionAuth(auth api.AuthFunc, session func() string) api.AuthFunc {
	return func(req *http.Request, nsid string) error {
		if s := session(); s != "" {
			req.Header.Set(api.SessionHeader, s)
		}
		return auth(req, nsid)
	}
}

// RegisterRunner makes a key, registers it as runner name of repo
// ("OWNER/NAME") with labels and, when approve is set, approves it as the
// admin and starts a session (see Runner.StartSession).
func (s *Server) RegisterRunner(t testing.TB, repo, name string, labels []string, approve bool) *Runner {
	t.Helper()
	ctx := context.Background()
	key, err := svcauth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	did, err := svcauth.DIDKey(key)
	if err != nil {
		t.Fatal(err)
	}
	signer := &svcauth.Signer{DID: did, Audience: s.DID(), Key: key}
	r := &Runner{Name: name, Repo: repo, DID: did, Signer: signer, url: s.URL}
	r.Client = &api.Client{BaseURL: s.URL, Auth: sessionAuth(signer.AuthFunc(), r.Session)}
	reg := &api.Client{BaseURL: s.URL, Auth: RegistrationAuth(signer.AuthFunc(), s.AdminToken)}
	if err := reg.Procedure(ctx, api.MethodRegisterRunner,
		api.RegisterRunnerInput{Repo: repo, Name: name, Labels: labels}, nil); err != nil {
		t.Fatalf("servertest: register runner %s: %v", name, err)
	}
	if approve {
		if err := s.Admin().Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: repo, Name: name}, nil); err != nil {
			t.Fatalf("servertest: approve runner %s: %v", name, err)
		}
		r.StartSession(t)
	}
	return r
}

// WaitRun polls run id until cond holds, failing the test after timeout.
func (s *Server) WaitRun(t testing.TB, id int64, timeout time.Duration, cond func(api.Run) bool) api.Run {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last api.Run
	var lastErr error
	for time.Now().Before(deadline) {
		var run api.Run
		lastErr = s.Admin().Query(context.Background(), api.MethodGetRun, url.Values{"run": {fmt.Sprint(id)}}, &run)
		if lastErr == nil {
			last = run
			if cond(run) {
				return run
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("servertest: run %d: condition not met within %s (last: state %s reason %s; err %v)",
		id, timeout, last.State, last.Reason, lastErr)
	return last
}

// testWriter sends log lines to t.Log until the test is over.
type testWriter struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}
