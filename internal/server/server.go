package server

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"knotless.dev/knotless/internal/oidc"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/svcauth"
	"knotless.dev/knotless/internal/version"
	"knotless.dev/knotless/internal/web"
)

// Defaults of Config, printed by knotless-server --help.
const (
	DefaultDataDir = "./knotless-data"
	DefaultListen  = "127.0.0.1:8080"
	DefaultLease   = 30 * time.Second
	// DefaultHandoverGrace is how long runs a runner handed over wait for
	// its next session (a restarted or upgraded knotless-run).
	DefaultHandoverGrace = 5 * time.Minute
	// DefaultMaxPushSize caps one push's request body (its commands and
	// pack, uncompressed), as git's receive.maxInputSize would; GitHub
	// refuses pushes over 2 GiB.
	DefaultMaxPushSize = 1 << 30
	// DefaultMaxFetchRequest caps one fetch request's body (wants and
	// haves, uncompressed): git's own http-backend buffers at most 10 MiB
	// of one (GIT_HTTP_MAX_REQUEST_BUFFER).
	DefaultMaxFetchRequest = 10 << 20
	// DefaultMaxOutputsSize caps one run's outputs archive.
	DefaultMaxOutputsSize = 1 << 30
)

// Names of files and directories inside Config.DataDir.
const (
	DBFile         = "knotless.db" // SQLite database (+ -wal, -shm), when knotless-server opens one
	LogsDir        = "logs"        // logs/<run>/<step>.log
	OutputsDir     = "outputs"     // outputs/<run>/outputs.tar
	ReposDir       = "repos"       // repos/<owner>/<name>.git (bare)
	TmpDir         = "tmp"         // spooled push bodies
	SecretKeyFile  = "secret.key"  // 32 random bytes, AES-256-GCM key of secrets at rest, 0600
	ServerKeyFile  = "server.key"  // P-256 private key (multibase), the server DID's key, 0600
	OIDCKeysFile   = oidc.KeysFile // the id tokens' RSA signing keys (JSON), 0600: internal/oidc
	AdminTokenFile = "admin.token" // the admin account's API token, written on first start, 0600
)

// AdminHandle is the handle of the account made on first start.
const AdminHandle = "admin"

// Config is every setting of a server. Zero fields take the defaults above.
type Config struct {
	// DataDir holds the logs, repositories and keys (see the *File and
	// *Dir constants; a SQLite Store's file is put there by whoever opens
	// it); created with mode 0700 if missing. Replicas on one PostgreSQL
	// database share one DataDir (a shared file system: docs/scaling.md).
	DataDir string
	// Store is where everything but files is kept, opened (and migrated)
	// by the caller, who also closes it after Server.Close: New neither
	// opens nor closes it, and knows it only as a store.Store. One that is
	// also a store.Coordinator (postgres) may be shared by replicas: the
	// server then takes DataDir's lock shared, spools pushes under a
	// directory of its own and listens for the other replicas'
	// notifications; any other (sqlite) must be this process's alone, and
	// the lock is exclusive. Required. knotless-server opens SQLite in
	// DataDir/DBFile, or PostgreSQL with --database.
	Store store.Store
	// StoreName names Store in the "server ready" log line (database=...),
	// e.g. "sqlite" or a PostgreSQL URL without its password; default
	// "store".
	StoreName string
	// Listen is the address knotless-server listens on (host:port); the
	// server itself uses it only to default URL.
	Listen string
	// URL is the public base URL clients and runners use, e.g.
	// "https://ci.example.com"; default "http://" + Listen (localhost when
	// Listen has no host). Clone URLs are made from it. New refuses one
	// that CheckURL refuses, and trims trailing slashes.
	URL string
	// Lease is how long a claim lasts without a heartbeat.
	Lease time.Duration
	// HandoverGrace is how long the runs of a runner session that handed
	// them over (dev.knotless.runner.handover) wait for the runner's next
	// session before they end errored/runner-lost.
	HandoverGrace time.Duration
	// Logger receives one line per event; default slog.Default().
	Logger *slog.Logger
	// Git is the git program; default "git" found in PATH.
	Git string
	// Limits bound what one client can hold of the server: connections,
	// and how long a request's header, body and answer may take.
	Limits Limits
	// ClientLimits bound what one client can make the server hold: tokens
	// remembered, runners registered, claims open, list pages.
	ClientLimits
	// Schedules are the settings of scheduled runs (schedules.go).
	Schedules Schedules
	// MaxPushSize caps the request body of one push in bytes (uncompressed):
	// a larger push is refused, before any of it is stored when it says
	// its length, else once that much arrived.
	MaxPushSize int64
	// MaxFetchRequest caps the request body of one fetch in bytes
	// (uncompressed wants and haves); a larger one is cut there.
	MaxFetchRequest int64
	// RepoQuota caps the size of one repository on disk in bytes: a push
	// that would take it past is refused. 0 is no quota.
	RepoQuota int64
	// MaxOutputsSize caps one run's outputs archive in bytes: a larger one
	// is refused before any of it is stored, with an error naming
	// --max-outputs-size that the runner writes to the run's setup log.
	MaxOutputsSize int64
	// Now is the server's clock for everything it records and expires:
	// API, registration and run tokens, web sessions, leases and the
	// handover grace, creation times. Default time.Now; tests give a clock
	// they move forward (servertest.Clock) instead of sleeping until
	// something expires. Network deadlines always use the real clock.
	Now func() time.Time
	// ReleaseDir, when set, is a directory of release files (what `make
	// release` wrote) served to anyone at DownloadPath + FILE; New refuses
	// one that is not a directory. Empty: DownloadPath answers 404 saying
	// how to serve them.
	ReleaseDir string
}

func (c *Config) fill() error {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.URL == "" {
		c.URL = "http://" + c.Listen
		if host, port, err := net.SplitHostPort(c.Listen); err == nil && host == "" {
			c.URL = "http://" + net.JoinHostPort("localhost", port)
		}
	}
	u, err := CheckURL(c.URL)
	if err != nil {
		return err
	}
	c.URL = u
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.HandoverGrace <= 0 {
		c.HandoverGrace = DefaultHandoverGrace
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.StoreName == "" {
		c.StoreName = "store"
	}
	c.Schedules.fill()
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Limits.fill()
	if c.MaxPushSize <= 0 {
		c.MaxPushSize = DefaultMaxPushSize
	}
	if c.MaxOutputsSize <= 0 {
		c.MaxOutputsSize = DefaultMaxOutputsSize
	}
	if c.MaxFetchRequest <= 0 {
		c.MaxFetchRequest = DefaultMaxFetchRequest
	}
	c.RepoQuota = max(c.RepoQuota, 0)
	if c.Git == "" {
		c.Git = "git"
	}
	c.ClientLimits.fill()
	p, err := exec.LookPath(c.Git)
	if err != nil {
		return fmt.Errorf("find git program %q (install git): %w", c.Git, err)
	}
	c.Git = p
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("data directory %s: %w", c.DataDir, err)
	}
	c.DataDir = abs
	if c.ReleaseDir != "" {
		if c.ReleaseDir, err = checkReleaseDir(c.ReleaseDir); err != nil {
			return err
		}
	}
	return nil
}

// Server is a running knotless-server. Its methods are safe for concurrent
// use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   store.Store
	did     string       // the server's DID: the audience of runner JWTs
	issuer  *oidc.Issuer // signs the runs' id tokens (idtokens.go)
	aead    cipher.AEAD
	replay  replayCaches
	coord   store.Coordinator // nil on SQLite: one process
	replica string            // this process's id among the replicas
	tmpDir  string            // where pushes are spooled: DATA/tmp, or DATA/tmp/REPLICA with replicas
	metrics *serverMetrics
	regRate *rateLimiter // runner registrations per client address
	hub     *hub
	claims  *claimWaiters
	logs    *logFiles
	outputs *outputFiles
	repoMu  repoLocks // serializes the pushes of a repository once their packs arrived
	handler http.Handler
	web     http.Handler // the pages (internal/web), behind the API and git

	followers atomic.Int64 // log followers waiting (getLog's long polls)

	seenMu sync.Mutex
	seen   map[int64]time.Time // runner id → last time lastSeenAt was written

	closing   chan struct{} // closed by Close and by Serve's shutdown: ends long polls
	closeOnce sync.Once
	sweepStop chan struct{}
	sweepDone chan struct{}

	stopListen context.CancelFunc // ends listen (replicas)
	listenDone chan struct{}

	retentionSt *retentionState // StartRetention's settings and sweep
	sched       scheduleState   // the loop firing schedules (schedules.go)

	lock *os.File // DIR/.lock, flocked until Close
}

// now is the server's clock (Config.Now).
func (s *Server) now() time.Time { return s.cfg.Now() }

// New locks the data directory (DIR/.lock; an *InUseError at once when
// another server holds it), prepares it (creating keys and, on first
// start, the admin account in cfg.Store and DIR/admin.token), extends the
// lease of every active run (runners could not renew while the server was
// down) and starts the lease sweeper. An invalid cfg.URL is an error
// naming the --url flag; a nil cfg.Store is an error. The caller must
// Close the server, which releases the lock, and then close cfg.Store,
// which stays the caller's (also when New fails).
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("server.New: Config.Store is nil (the caller opens the store)")
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	_, replicas := cfg.Store.(store.Coordinator)
	lock, err := lockDataDir(cfg.DataDir, replicas)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, cfg, lock)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.web = web.New(web.Config{Backend: webBackend{s}, Secure: strings.HasPrefix(cfg.URL, "https://"), Logger: s.log})
	s.handler = s.withDeadlines(s.routes())
	go s.sweep()
	go s.scheduleLoop()
	if s.coord != nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopListen = cancel
		go s.listen(ctx)
	}
	s.log.Info("server ready", "url", cfg.URL, "data", cfg.DataDir, "database", cfg.StoreName,
		"replica", s.replica, "did", s.did, "version", version.Version)
	if cfg.ReleaseDir != "" {
		s.log.Info("serving release files", "dir", cfg.ReleaseDir, "url", cfg.URL+DownloadPath, "install", cfg.URL+DownloadPath+InstallScript)
		if _, err := os.Stat(filepath.Join(cfg.ReleaseDir, ReleaseSums)); err != nil {
			s.log.Warn("the release directory has no "+ReleaseSums+": is it what `make release` wrote?", "dir", cfg.ReleaseDir)
		}
	}
	return s, nil
}

// open does New's work while the data directory is locked.
func open(ctx context.Context, cfg Config, lock *os.File) (*Server, error) {
	s := &Server{
		lock:       lock,
		store:      cfg.Store,
		cfg:        cfg,
		log:        slog.New(clipHandler{cfg.Logger.Handler()}), // no client input unbounded in a log line
		replica:    newReplicaID(),
		tmpDir:     filepath.Join(cfg.DataDir, TmpDir),
		listenDone: make(chan struct{}),
		regRate:    newRateLimiter(cfg.ClientLimits.RegistrationsPerMinute, time.Minute),
		hub:        newHub(),
		claims:     newClaimWaiters(),
		logs:       &logFiles{dir: filepath.Join(cfg.DataDir, LogsDir)},
		outputs:    &outputFiles{dir: filepath.Join(cfg.DataDir, OutputsDir)},
		seen:       map[int64]time.Time{},
		closing:    make(chan struct{}),
		sweepStop:  make(chan struct{}),
		sweepDone:  make(chan struct{}),

		retentionSt: &retentionState{},
		sched:       scheduleState{wake: make(chan struct{}, 1), done: make(chan struct{})},
	}
	for _, d := range []string{LogsDir, OutputsDir, ReposDir, TmpDir} {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("create data directory: %w", err)
		}
	}
	s.coord, _ = cfg.Store.(store.Coordinator)
	if s.coord != nil {
		s.tmpDir = filepath.Join(s.tmpDir, s.replica)
		if err := os.MkdirAll(s.tmpDir, 0o700); err != nil {
			return nil, fmt.Errorf("create data directory: %w", err)
		}
	}
	s.cleanTmp()
	secretKey, err := loadOrCreate(filepath.Join(cfg.DataDir, SecretKeyFile), func() ([]byte, error) {
		k := make([]byte, 32)
		_, err := rand.Read(k)
		return k, err
	})
	if err != nil {
		return nil, err
	}
	if len(secretKey) != 32 {
		return nil, fmt.Errorf("%s: want 32 bytes, found %d (restore it from a backup; secrets cannot be read without it)",
			filepath.Join(cfg.DataDir, SecretKeyFile), len(secretKey))
	}
	block, err := aes.NewCipher(secretKey)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	if s.aead, err = cipher.NewGCM(block); err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	keyText, err := loadOrCreate(filepath.Join(cfg.DataDir, ServerKeyFile), func() ([]byte, error) {
		k, err := svcauth.GenerateKey()
		if err != nil {
			return nil, err
		}
		return []byte(k.Multibase() + "\n"), nil
	})
	if err != nil {
		return nil, err
	}
	serverKey, err := svcauth.ParseKey(string(keyText))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(cfg.DataDir, ServerKeyFile), err)
	}
	if s.did, err = svcauth.DIDKey(serverKey); err != nil {
		return nil, err
	}
	keys, err := oidc.OpenKeyring(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s.issuer = &oidc.Issuer{URL: cfg.URL, Keys: keys}
	s.replay = newReplayCaches(cfg.ClientLimits, s.store)
	s.metrics = newServerMetrics(s)
	if err := s.ensureAdmin(ctx); err != nil {
		return nil, err
	}
	if n, err := s.store.ExtendLeases(ctx, s.now().Add(cfg.Lease)); err != nil {
		return nil, err
	} else if n > 0 {
		s.log.Info("extended leases of active runs after start", "runs", n, "lease", cfg.Lease)
	}
	return s, nil
}

// DID returns the server's service DID (a did:key), the audience of runner
// JWTs.
func (s *Server) DID() string { return s.did }

// Config returns the settings in effect (defaults filled in).
func (s *Server) Config() Config { return s.cfg }

// Handler returns the HTTP handler of the whole server: /xrpc/ and git.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers requests on ln until ctx is cancelled, then stops accepting,
// ends long polls, waits up to 30 s for requests in flight and returns nil.
// It does not Close the server. The connections it holds are bounded by
// Config.Limits (see connLimiter).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	lim := s.cfg.Limits
	cl := newConnLimiter(ln, lim.MaxConns, lim.MaxConnsPerClient, s.log)
	ln = cl
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: lim.HeaderTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		IdleTimeout:       lim.IdleTimeout,
		ConnState:         cl.connState,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "addr", ln.Addr().String())
	s.closeOnce.Do(func() { close(s.closing) })
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	<-errc
	return nil
}

// Close ends long polls, stops the lease sweeper, the retention sweep
// and the object store's mover (and, with replicas, the listening for
// notifications), waiting for each, and then releases the data
// directory's lock. It does not close Config.Store: the caller does, after Close. Call
// it after Serve returned. It always returns nil (an io.Closer).
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	select {
	case <-s.sweepStop:
	default:
		close(s.sweepStop)
	}
	<-s.sweepDone
	<-s.sched.done
	s.stopRetention()
	s.stopObjects()
	if s.stopListen != nil {
		s.stopListen()
		<-s.listenDone
	}
	// Unlock explicitly: a child forked at this moment (git, in another
	// goroutine) shares the open file description until it execs, and
	// closing our descriptor alone would leave the lock held meanwhile.
	_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
	s.lock.Close()
	return nil
}

// loadOrCreate reads path, or creates it (mode 0600, never replacing an
// existing file) with the bytes gen returns.
func loadOrCreate(path string, gen func() ([]byte, error)) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	b, err = gen()
	if err != nil {
		return nil, fmt.Errorf("make %s: %w", path, err)
	}
	// Written whole under another name, then linked into place (which
	// fails if path exists): a replica starting at the same moment on the
	// same directory reads either nothing or the whole key, never a part.
	tmp := path + "." + newReplicaID() + ".tmp"
	if err := writeNew(tmp, b); err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) { // made by a concurrent start
			return os.ReadFile(path)
		}
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return b, nil
}

// writeNew writes a new file with mode 0600, failing if it exists.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// ensureAdmin creates the admin account on first start and writes its token
// to DIR/admin.token.
func (s *Server) ensureAdmin(ctx context.Context) error {
	if s.coord != nil { // replicas starting together: one makes it
		l, err := s.coord.Lock(ctx, store.LockSetup, 0)
		if err != nil {
			return fmt.Errorf("lock first start: %w", err)
		}
		defer l.Release()
	}
	_, err := s.store.AccountByHandle(ctx, AdminHandle)
	if err == nil {
		return nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("look up admin account: %w", err)
	}
	did, err := freshDID()
	if err != nil {
		return err
	}
	token, err := newToken(accountTokenPrefix)
	if err != nil {
		return err
	}
	path := filepath.Join(s.cfg.DataDir, AdminTokenFile)
	os.Remove(path) // a stale file from a deleted database must not linger
	if err := writeNew(path, []byte(token+"\n")); err != nil {
		return err
	}
	if _, err := s.store.CreateAccount(ctx, store.Account{Handle: AdminHandle, DID: did, Admin: true, CreatedAt: s.now()},
		hashToken(token)); err != nil {
		os.Remove(path)
		return fmt.Errorf("create admin account: %w", err)
	}
	s.log.Info("admin account created; admin token written to "+path, "handle", AdminHandle, "path", path)
	return nil
}

// freshDID makes a did:key for an account that brings no DID of its own.
func freshDID() (string, error) {
	k, err := svcauth.GenerateKey()
	if err != nil {
		return "", err
	}
	return svcauth.DIDKey(k)
}

// parsePublicKey reads a multibase public key.
func parsePublicKey(mb string) (atcrypto.PublicKey, error) {
	return atcrypto.ParsePublicMultibase(mb)
}
