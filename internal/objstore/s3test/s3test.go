// Package s3test runs a real S3 server for tests and demos: versitygw
// (github.com/versity/versitygw) over a POSIX directory, built from its Go
// module at Version by Install and started on loopback by Start. Proxy
// puts faults between a client and it (error storms, a kill after N
// bytes, stalls).
//
// Why versitygw, not SeaweedFS: one process and one directory (SeaweedFS
// runs a master, a volume server and a filer), a cold build of about 80 s
// on two cores, an S3 API that keeps objects as plain files (a test can
// look at what a kill left), conditional writes (If-None-Match), and it
// lists in name order, not write order, as S3 does.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/testenv"
)

// Version is versitygw's module version that Install builds.
const Version = "v1.8.0"

// Module is the package Install builds.
const Module = "github.com/versity/versitygw/cmd/versitygw"

// ToolsDir is where Install keeps the binary (testenv.ToolsDir:
// ~/.cache/knotless/tools, outside any work tree so a clean clone reuses
// it).
func ToolsDir() (string, error) { return testenv.ToolsDir() }

// Install returns the path of versitygw at Version, building it with `go
// install` (from the Go module proxy) when ToolsDir does not hold it yet,
// once across processes (testenv.InstallGoTool). Errors: the go command's,
// with its output.
func Install() (string, error) { return testenv.InstallGoTool(Module, Version) }

// Server is one running versitygw.
type Server struct {
	// URL is its endpoint, http://127.0.0.1:PORT.
	URL string
	// Bucket is the bucket Start made.
	Bucket string
	// AccessKey and SecretKey are its root credentials.
	AccessKey, SecretKey string
	// Dir is the directory it serves (Dir/BUCKET/NAME is an object).
	Dir string

	bin  string
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	log  *bytes.Buffer
}

// Start installs (Install) and starts versitygw on a free loopback port
// over a new temp directory, makes the bucket "knotless" and stops it
// when the test ends. It fails the test when anything fails.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Run(t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Run is Start outside a test (make demo-scale): it installs and starts
// versitygw over dir (made if missing) on addr (host:port; port 0 picks
// a free one) with new random root credentials, and makes the bucket
// "knotless". The caller stops it (Stop). Errors: Install's, the
// server's start (with what it printed), the bucket's creation.
func Run(dir, addr string) (*Server, error) {
	bin, err := Install()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &Server{Bucket: "knotless", AccessKey: "knotless-test", SecretKey: randomKey(), Dir: dir, bin: bin}
	if strings.HasSuffix(addr, ":0") {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		addr = l.Addr().String()
		l.Close()
	}
	s.addr = addr
	s.URL = "http://" + s.addr
	if err := s.start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client().MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
		s.Stop()
		return nil, fmt.Errorf("make bucket: %v\n%s", err, s.log)
	}
	return s, nil
}

func randomKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Server) start() error {
	s.log = new(bytes.Buffer)
	cmd := exec.Command(s.bin, "--port", s.addr, "posix", s.Dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("versitygw exited: %s", s.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.Kill()
	return fmt.Errorf("versitygw did not listen on %s in 30s: %s", s.addr, s.log)
}

// Kill ends the server at once (SIGKILL), as a crash would; its directory
// stays. Restart brings it back on the same address.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts a killed server again over the same directory and port;
// it fails the test when the server does not start.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		t.Fatalf("s3test: restart: %v", err)
	}
}

// Stop ends the server; safe to call twice.
func (s *Server) Stop() { s.Kill() }

// Log is what the server printed so far.
func (s *Server) Log() string { return s.log.String() }

// Credentials are static credentials for the server's root user.
func (s *Server) Credentials() *credentials.Credentials {
	return credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")
}

// Env is the environment a program reads the credentials from (the AWS
// SDKs' variables), for processes the test starts.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey}
}

// BucketURL is Config.URL for the bucket and prefix, through endpoint
// (the server's URL, or a Proxy's).
func (s *Server) BucketURL(endpoint, prefix string) string {
	u := strings.TrimSuffix(endpoint, "/") + "/" + s.Bucket
	if prefix != "" {
		u += "/" + prefix
	}
	return u
}

// Config is an objstore.Config for prefix with the root credentials, at
// the server itself.
func (s *Server) Config(prefix string) objstore.Config {
	return objstore.Config{URL: s.BucketURL(s.URL, prefix), Credentials: s.Credentials(), Timeout: 10 * time.Second}
}

// Open opens the bucket at prefix (Config); it fails the test on error.
func (s *Server) Open(t testing.TB, prefix string) *objstore.Bucket {
	t.Helper()
	b, err := objstore.Open(s.Config(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (s *Server) client() *minio.Client {
	c, err := minio.New(s.addr, &minio.Options{Creds: s.Credentials(), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		panic(err)
	}
	return c
}

// MakeBucket makes another bucket (for a test of two buckets).
func (s *Server) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client().MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
}
