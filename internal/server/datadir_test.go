package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// quietConfig is a server's on dir answering at url, with a SQLite store
// on dir that is closed when the test ends.
func quietConfig(t testing.TB, dir, url string) server.Config {
	return server.Config{DataDir: dir, Listen: "127.0.0.1:0", URL: url, Store: servertest.OpenStore(t, dir, ""),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func TestNew_SecondServerOnSameDataDirectoryFailsNamingFirstPID(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	b, err := os.ReadFile(filepath.Join(s.DataDir, server.LockFile))
	if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Fatalf("%s = %q, %v; want this process's PID %d", server.LockFile, b, err, os.Getpid())
	}
	second, err := server.New(context.Background(), quietConfig(t, s.DataDir, "http://127.0.0.1:1"))
	if err == nil {
		second.Close()
		t.Fatal("a second server started on a data directory in use")
	}
	want := fmt.Sprintf("data directory %s is in use by another knotless-server (pid %d)", s.DataDir, os.Getpid())
	var inUse *server.InUseError
	if !errors.As(err, &inUse) || err.Error() != want {
		t.Fatalf("second start: err = %v; want %q", err, want)
	}
	if err := server.CheckDataDir(s.DataDir); err == nil || err.Error() != want {
		t.Errorf("CheckDataDir while held = %v; want %q", err, want)
	}
	// The first server is unharmed, and once it closes the directory is free.
	if _, err := os.Stat(filepath.Join(s.DataDir, server.DBFile)); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := server.CheckDataDir(s.DataDir); err != nil {
		t.Errorf("CheckDataDir after Close = %v; want nil", err)
	}
	s.Restart() // takes the lock again
}

func TestNew_URLWithoutSchemeOrWithQueryIsRefused(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"ci.example.com", "localhost:8080", "ftp://ci.example.com", "http://", "https:///x",
		"https://ci.example.com/?a=b", "https://ci.example.com/#top", "https://user:pw@ci.example.com",
	} {
		srv, err := server.New(context.Background(), quietConfig(t, t.TempDir(), bad))
		if err == nil {
			srv.Close()
			t.Errorf("URL %q was accepted", bad)
			continue
		}
		if !strings.Contains(err.Error(), "--url") || !strings.Contains(err.Error(), bad) {
			t.Errorf("URL %q: err = %q; want one naming --url and the value", bad, err)
		}
	}
	for in, want := range map[string]string{
		"https://ci.example.com/":       "https://ci.example.com",
		"http://10.0.0.5:8080":          "http://10.0.0.5:8080",
		"https://example.com/knotless/": "https://example.com/knotless",
	} {
		got, err := server.CheckURL(in)
		if err != nil || got != want {
			t.Errorf("CheckURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	srv, err := server.New(context.Background(), quietConfig(t, t.TempDir(), "https://ci.example.com/"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got := srv.Config().URL; got != "https://ci.example.com" {
		t.Errorf("Config().URL = %q; want the trailing slash trimmed", got)
	}
}
