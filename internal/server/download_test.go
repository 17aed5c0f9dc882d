package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// releaseFixture is a server serving a release directory that sits beside
// its data directory (whose admin.token is the secret a traversal would
// want), with a subdirectory, a hidden file and symlinks out of it.
type releaseFixture struct {
	*servertest.Server
	release string
	secret  string // the admin token's text
	program []byte // the release's knotless-run-linux-amd64
}

func newReleaseFixture(t *testing.T) *releaseFixture {
	t.Helper()
	base := t.TempDir()
	data, release := filepath.Join(base, "data"), filepath.Join(base, "release")
	program := []byte("\x7fELF a stand-in for knotless-run, " + strings.Repeat("x", 5000))
	files := map[string][]byte{
		"knotless-run-linux-amd64": program,
		server.ReleaseSums:         []byte("00  knotless-run-linux-amd64\n"),
		".hidden":                  []byte("HIDDEN-CONTENT"),
		"sub/inner":                []byte("INNER-CONTENT"),
	}
	for name, content := range files {
		p := filepath.Join(release, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := servertest.Start(t, servertest.Options{DataDir: data, ReleaseDir: release})
	for name, target := range map[string]string{
		"escape":    "../data/" + server.AdminTokenFile,
		"absolute":  filepath.Join(data, server.AdminTokenFile),
		"updir":     "..",
		"tokenlink": filepath.Join("..", "data"),
	} {
		if err := os.Symlink(target, filepath.Join(release, name)); err != nil {
			t.Fatal(err)
		}
	}
	return &releaseFixture{Server: s, release: release, secret: s.AdminToken, program: program}
}

// rawGet sends target as the request line's target, byte for byte (no
// client cleans or escapes it), and returns the status and body.
func rawGet(t *testing.T, addr, method, target string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method, target, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Nothing outside the release directory, and nothing in it but its
// regular files, is served: not through "..", encoded or not, nor a
// symlink leading out, nor a subdirectory, a hidden file or a listing.
func TestDownload_RefusesPathTraversal(t *testing.T) {
	f := newReleaseFixture(t)
	// The positive control: a file of the release is served.
	if code, body := rawGet(t, f.Addr, "GET", server.DownloadPath+"knotless-run-linux-amd64"); code != http.StatusOK || body != string(f.program) {
		t.Fatalf("the release's file: %d, %d bytes; want 200 and its %d bytes", code, len(body), len(f.program))
	}
	for _, target := range []string{
		server.DownloadPath + "../data/" + server.AdminTokenFile,
		server.DownloadPath + "%2e%2e/data/" + server.AdminTokenFile,
		server.DownloadPath + "..%2fdata%2f" + server.AdminTokenFile,
		server.DownloadPath + "%2e%2e%2fdata%2f" + server.AdminTokenFile,
		server.DownloadPath + "knotless-run-linux-amd64/../../data/" + server.AdminTokenFile,
		server.DownloadPath + `..\data\` + server.AdminTokenFile,
		server.DownloadPath + "..%5cdata%5c" + server.AdminTokenFile,
		server.DownloadPath + "escape",
		server.DownloadPath + "absolute",
		server.DownloadPath + "updir",
		server.DownloadPath + "updir/data/" + server.AdminTokenFile,
		server.DownloadPath + "updir%2fdata%2f" + server.AdminTokenFile,
		server.DownloadPath + "tokenlink%2f" + server.AdminTokenFile,
		server.DownloadPath + "sub",
		server.DownloadPath + "sub/inner",
		server.DownloadPath + "sub%2finner",
		server.DownloadPath + ".hidden",
		server.DownloadPath,
		server.DownloadPath + ".",
		server.DownloadPath + "%00",
		"/-/download",
		"http://other" + server.DownloadPath + "../data/" + server.AdminTokenFile,
	} {
		code, body := rawGet(t, f.Addr, "GET", target)
		if code == http.StatusOK || strings.Contains(body, f.secret) || strings.Contains(body, "INNER-CONTENT") || strings.Contains(body, "HIDDEN-CONTENT") || strings.Contains(body, "knotless-run-linux-amd64\n") {
			t.Errorf("GET %s: %d, want no file served:\n%.300s", target, code, body)
		}
	}
}

// The release's files are served whole, with HEAD and Range (a resumed
// download), as bytes; other methods are refused.
func TestDownload_ServesTheReleaseFilesWhole(t *testing.T) {
	f := newReleaseFixture(t)
	url := f.URL + server.DownloadPath + "knotless-run-linux-amd64"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != string(f.program) || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("GET: %d %q, %d bytes; want 200 application/octet-stream and the file's %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body), len(f.program))
	}
	resp, err = http.Head(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(f.program)) {
		t.Fatalf("HEAD: %d, length %d; want 200, %d", resp.StatusCode, resp.ContentLength, len(f.program))
	}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", url, nil)
	req.Header.Set("Range", "bytes=100-")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || string(body) != string(f.program[100:]) {
		t.Fatalf("Range bytes=100-: %d, %d bytes; want 206 and the file from byte 100", resp.StatusCode, len(body))
	}
	resp, err = http.Post(url, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405", resp.StatusCode)
	}
	if code, body := rawGet(t, f.Addr, "GET", server.DownloadPath+"missing"); code != http.StatusNotFound || !strings.Contains(body, server.ReleaseSums) {
		t.Fatalf("a missing file: %d %q; want 404 pointing at %s", code, body, server.ReleaseSums)
	}
}

// A server started without a release directory says how to serve one.
func TestDownload_WithoutReleaseDirSaysHowToServe(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	code, body := rawGet(t, s.Addr, "GET", server.DownloadPath+"knotless-run-linux-amd64")
	if code != http.StatusNotFound || !strings.Contains(body, "--release-dir") {
		t.Fatalf("%d %q; want 404 naming --release-dir", code, body)
	}
}

// A release directory that is not one stops the start, naming the flag.
func TestServer_ReleaseDirThatIsNoDirectoryIsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "knotless-run-linux-amd64")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(t.TempDir(), "missing")} {
		data := t.TempDir()
		srv, err := server.New(context.Background(), server.Config{DataDir: data, ReleaseDir: dir, Store: servertest.OpenStore(t, data, "")})
		if err == nil {
			srv.Close()
			t.Fatalf("--release-dir %s: started", dir)
		}
		if !strings.Contains(err.Error(), "--release-dir "+dir) || !strings.Contains(err.Error(), "make release") {
			t.Errorf("--release-dir %s: %v; want an error naming the flag and what to give", dir, err)
		}
	}
}
