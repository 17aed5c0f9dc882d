// Package pgtest starts a real, throwaway PostgreSQL server for tests,
// benchmarks and `make demo-scale`: Debian's server binaries
// (/usr/lib/postgresql/*/bin, or KNOTLESS_TEST_POSTGRES_BIN), a cluster made
// by initdb in a new directory under the system's temporary directory, run
// as an unprivileged user (nobody, when the caller is root: PostgreSQL
// refuses root) on a free loopback port, with durability off (a test
// database need not survive a crash). Stop removes it all.
//
// A test that needs PostgreSQL calls Start: it fails when the binaries are
// missing and KNOTLESS_TEST_POSTGRES_REQUIRED=1 (CI), and skips, saying
// why, otherwise.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RequiredEnv names the variable that makes a missing PostgreSQL a test
// failure instead of a skip.
const RequiredEnv = "KNOTLESS_TEST_POSTGRES_REQUIRED"

// BinEnv names the variable that points at the directory holding initdb
// and postgres.
const BinEnv = "KNOTLESS_TEST_POSTGRES_BIN"

// User is the role the clusters are made with (trust authentication on
// loopback only).
const User = "knotless"

// Server is one running PostgreSQL cluster.
type Server struct {
	Dir  string // the cluster's directory (data and socket)
	Port int
	cmd  *exec.Cmd
	done chan struct{}
	logs *bytes.Buffer
	n    atomic.Int64 // databases made
}

// Bin finds the directory of initdb and postgres: BinEnv, else the newest
// /usr/lib/postgresql/*/bin, else initdb's directory in PATH.
func Bin() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL server binaries not found (install Debian's postgresql package, or set " + BinEnv + ")")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start starts a server for t and stops it when t ends. Without the
// binaries it fails t when RequiredEnv is 1, else skips t.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartServer(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop PostgreSQL: %v", err)
		}
	})
	return s
}

// Require returns the directory of the server binaries (Bin); without
// them it fails t when RequiredEnv is 1, else skips t, saying why.
func Require(t testing.TB) string {
	t.Helper()
	bin, err := Bin()
	if err != nil {
		if os.Getenv(RequiredEnv) == "1" {
			t.Fatalf("%v; %s=1 requires it", err, RequiredEnv)
		}
		t.Skipf("skipping: %v (set %s=1 to make this a failure)", err, RequiredEnv)
	}
	return bin
}

// StartServer makes a new cluster with the binaries in bin and starts it.
// The caller must Stop it.
func StartServer(ctx context.Context, bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "knotless-pg-")
	if err != nil {
		return nil, err
	}
	cred, err := unprivileged()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", User, "--auth=trust",
		"--locale=C", "--encoding=UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	var lastErr error
	for range 5 { // a port found free may be taken before postgres binds it
		s, err := start(ctx, bin, dir, data, cred)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func start(ctx context.Context, bin, dir, data string, cred *syscall.Credential) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Port: port, done: make(chan struct{}), logs: &bytes.Buffer{}}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "shared_buffers=64MB")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.Dir = dir
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("postgres exited at start: %s", s.logs.String())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("postgres did not accept connections within 30 s: %v\n%s", err, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling for readiness, bounded by the deadline
	}
}

// URL returns the connection URL of database db on s.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, s.Port, db)
}

// NewDatabase creates a new, empty database and returns its URL.
func (s *Server) NewDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("knotless_%d", s.n.Add(1))
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.URL(name), nil
}

// Database is NewDatabase for a test: it fails t on error.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	url, err := s.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// Logs returns what the server printed so far.
func (s *Server) Logs() string { return s.logs.String() }

// Stop shuts the server down (fast: open sessions are ended) and removes
// its directory.
func (s *Server) Stop() error {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	return os.RemoveAll(s.Dir)
}

// unprivileged returns the credentials postgres runs with: nobody's when
// this process is root, nil (this process's) otherwise.
func unprivileged() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no user nobody: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FreePort returns a loopback TCP port free at the moment (another
// process may take it before the caller binds it).
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
