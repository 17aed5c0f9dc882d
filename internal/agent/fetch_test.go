//go:build linux

package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent"
)

// entryArchive writes a cache entry's directory as the shared store
// keeps it (the agent's copy format, zstd): entry.json, member "0" a
// directory (files, a subdirectory, a relative link, a read-only
// directory), member "1" a single file. It returns the archive and the
// entry's directory.
func entryArchive(t *testing.T) ([]byte, string) {
	t.Helper()
	dir := t.TempDir()
	write := func(rel, data string, mode os.FileMode) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("entry.json", `{"repo":"r","key":"k"}`, 0o644)
	write("0/a.txt", "alpha\n", 0o644)
	write("0/sub/b.bin", strings.Repeat("\x00\x01b", 70000), 0o755)
	write("0/ro/c.txt", "read-only dir's file", 0o444)
	if err := os.Symlink("../a.txt", filepath.Join(dir, "0", "sub", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "0", "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "0", "ro"), 0o755) })
	write("1", "the second path, a file\n", 0o600)
	var buf bytes.Buffer
	zw, err := agent.Compress(&buf, agent.CompressionZstd)
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.WriteTar(context.Background(), zw, agent.HostTree{}, dir); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), dir
}

// serveArchive serves b at /entry.tzst (any query) and counts requests.
func serveArchive(t *testing.T, b []byte) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/entry.tzst?X-Amz-Signature=secret-signature", &n
}

func fetchReq(url string, b []byte, members map[string]string) agent.Fetch {
	sum := sha256.Sum256(b)
	return agent.Fetch{URL: url, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(b)), Compression: agent.CompressionZstd, Members: members}
}

// sameTree fails unless got holds what want holds, byte for byte, with
// the same modes and link targets.
func sameTree(t *testing.T, want, got string) {
	t.Helper()
	err := filepath.Walk(want, func(p string, wi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		q := filepath.Join(got, rel)
		gi, err := os.Lstat(q)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		if gi.Mode() != wi.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, gi.Mode(), wi.Mode())
		}
		switch {
		case wi.Mode()&os.ModeSymlink != 0:
			wl, _ := os.Readlink(p)
			gl, _ := os.Readlink(q)
			if wl != gl {
				t.Errorf("%s: link to %q, want %q", rel, gl, wl)
			}
		case wi.Mode().IsRegular():
			wb, _ := os.ReadFile(p)
			gb, err := os.ReadFile(q)
			if err != nil || !bytes.Equal(wb, gb) {
				t.Errorf("%s: %d bytes differ from the entry's %d (%v)", rel, len(gb), len(wb), err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFetch_UnpacksTheListedMembersIntoTheirDestinations: the agent
// downloads an entry's archive itself and unpacks member "0" (a tree)
// into a directory already there, merging (a file of that directory the
// archive does not hold stays), and member "1" (a file) at a path whose
// parents do not exist; entry.json, not listed, is written nowhere. The
// answer says the archive's length and SHA-256 and the members found.
func TestFetch_UnpacksTheListedMembersIntoTheirDestinations(t *testing.T) {
	ta := startAgent(t)
	b, entry := entryArchive(t)
	url, _ := serveArchive(t, b)
	out := t.TempDir()
	dst0, dst1 := filepath.Join(out, "home", ".cache", "go"), filepath.Join(out, "work", "deep", "file")
	if err := os.MkdirAll(dst0, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst0, "kept"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := fetchReq(url, b, map[string]string{"0": dst0, "1": dst1})
	got, err := ta.cl.Fetch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bytes != req.Bytes || got.SHA256 != req.SHA256 || strings.Join(got.Members, ",") != "0,1" {
		t.Errorf("answer %+v, want %d bytes, sha256 %s, members 0,1", got, req.Bytes, req.SHA256)
	}
	sameTree(t, filepath.Join(entry, "0"), dst0)
	sameTree(t, filepath.Join(entry, "1"), dst1)
	if b, err := os.ReadFile(filepath.Join(dst0, "kept")); err != nil || string(b) != "mine" {
		t.Errorf("the file the directory held before: %q, %v", b, err)
	}
	_ = filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Name() == "entry.json" {
			t.Errorf("entry.json, not a listed member, was written at %s", p)
		}
		return nil
	})
	_ = os.Chmod(filepath.Join(dst0, "ro"), 0o755)
}

// TestFetch_WrongSHA256FailsAndRemovesWhatItMade: an archive whose bytes
// are not the entry's (its SHA-256 differs) fails the fetch, and what
// the fetch made is gone: the new destination does not exist, a
// directory that was there holds only what it held before.
func TestFetch_WrongSHA256FailsAndRemovesWhatItMade(t *testing.T) {
	ta := startAgent(t)
	b, _ := entryArchive(t)
	url, _ := serveArchive(t, b)
	out := t.TempDir()
	dst0, dst1 := filepath.Join(out, "was-there"), filepath.Join(out, "new", "file")
	if err := os.MkdirAll(dst0, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst0, "kept"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := fetchReq(url, b, map[string]string{"0": dst0, "1": dst1})
	req.SHA256 = strings.Repeat("ab", 32)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := ta.cl.Fetch(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "not the store's entry") {
		t.Fatalf("fetch of an archive with another SHA-256: %v, want an error saying its bytes are not the entry's", err)
	}
	if _, err := os.Lstat(filepath.Join(out, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the fetch's new directory is still there: %v", err)
	}
	ents, _ := os.ReadDir(dst0)
	if len(ents) != 1 || ents[0].Name() != "kept" {
		t.Errorf("the directory that was there holds %v, want only kept", ents)
	}
}

// TestFetch_StalledDownloadFailsInBoundedTime: a store that sends part
// of the archive and then nothing fails the fetch once no byte arrived
// for the request's stall bound (not when the run's own timeout ends),
// saying so, and the partial unpacking is removed.
func TestFetch_StalledDownloadFailsInBoundedTime(t *testing.T) {
	ta := startAgent(t)
	b, _ := entryArchive(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(b[:len(b)/2])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	out := t.TempDir()
	req := fetchReq(srv.URL+"/entry.tzst", b, map[string]string{"0": filepath.Join(out, "c0"), "1": filepath.Join(out, "c1")})
	req.StallMS = 700
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := ta.cl.Fetch(ctx, req)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "no byte arrived for 700ms") {
		t.Fatalf("fetch from a stalled store: %v, want an error saying no byte arrived for 700ms", err)
	}
	if took > 10*time.Second {
		t.Errorf("the stalled fetch failed after %s, want about 700ms", took)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a stalled fetch left %v", ents)
	}
}

// TestFetch_StoreRefusalSaysTheS3CodeNotTheSignature: a presigned URL
// the store refuses (expired) fails with the store's status and S3 code;
// the URL's query (its signature) is in no error.
func TestFetch_StoreRefusalSaysTheS3CodeNotTheSignature(t *testing.T) {
	ta := startAgent(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>`)
	}))
	defer srv.Close()
	b, _ := entryArchive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := ta.cl.Fetch(ctx, fetchReq(srv.URL+"/e?X-Amz-Signature=secret-signature", b, map[string]string{"0": filepath.Join(t.TempDir(), "c")}))
	if err == nil || !strings.Contains(err.Error(), "403 Forbidden: AccessDenied: Request has expired") {
		t.Fatalf("fetch of a refused URL: %v, want the status and S3 code", err)
	}
	// Unreachable: the dial's error names the URL, without its query.
	_, err = ta.cl.Fetch(ctx, fetchReq("http://127.0.0.1:1/e?X-Amz-Signature=secret-signature", b, map[string]string{"0": filepath.Join(t.TempDir(), "c")}))
	if err == nil || strings.Contains(err.Error(), "secret-signature") || !strings.Contains(err.Error(), "127.0.0.1:1/e") {
		t.Fatalf("fetch of an unreachable URL: %v, want an error naming the URL without its query", err)
	}
}

// craftedArchive is a zstd tar of entries made by hand.
func craftedArchive(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := agent.Compress(&buf, agent.CompressionZstd)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
		}
		if h.Mode == 0 {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write([]byte("evil"))
		}
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

// TestFetch_CraftedArchiveCannotEscapeItsDestination: an archive made to
// write outside a member's destination (a name climbing out, an absolute
// name, a file through a link the archive made to a directory outside,
// a hard link) fails the fetch, writes nothing outside, and leaves
// nothing of the fetch behind.
func TestFetch_CraftedArchiveCannotEscapeItsDestination(t *testing.T) {
	ta := startAgent(t)
	dir := func(n string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeDir} }
	file := func(n string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeReg} }
	link := func(n, to string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: to} }
	for name, mk := range map[string]func(outside string) []*tar.Header{
		"climbing name": func(string) []*tar.Header { return []*tar.Header{dir("."), dir("./0"), file("./0/../../escaped")} },
		"absolute name": func(o string) []*tar.Header { return []*tar.Header{dir("."), dir("./0"), file(o + "/escaped")} },
		"through a link out": func(o string) []*tar.Header {
			return []*tar.Header{dir("."), dir("./0"), link("./0/l", o), file("./0/l/escaped")}
		},
		"through a link up": func(string) []*tar.Header {
			return []*tar.Header{dir("."), dir("./0"), link("./0/l", "../../.."), file("./0/l/escaped")}
		},
		"member is a link out": func(o string) []*tar.Header { return []*tar.Header{dir("."), link("./0", o), file("./0/escaped")} },
		"hard link": func(o string) []*tar.Header {
			return []*tar.Header{dir("."), dir("./0"), {Name: "./0/h", Typeflag: tar.TypeLink, Linkname: o + "/escaped"}}
		},
		"member cut by another": func(string) []*tar.Header {
			return []*tar.Header{dir("."), dir("./0"), dir("./1"), file("./0/escaped")}
		},
	} {
		t.Run(name, func(t *testing.T) {
			outside := t.TempDir()
			out := t.TempDir()
			b := craftedArchive(t, mk(outside)...)
			url, _ := serveArchive(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := ta.cl.Fetch(ctx, fetchReq(url, b, map[string]string{"0": filepath.Join(out, "c0"), "1": filepath.Join(out, "c1")}))
			if err == nil {
				t.Fatal("the crafted archive was fetched")
			}
			t.Logf("error: %v", err)
			for _, d := range []string{outside, out, filepath.Dir(out)} {
				if _, err := os.Lstat(filepath.Join(d, "escaped")); err == nil {
					t.Errorf("the archive wrote %s", filepath.Join(d, "escaped"))
				}
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("the failed fetch left %v", ents)
			}
		})
	}
}

// TestFetch_OldAgentWithoutTheCapabilityIsNotAsked: an agent whose hello
// lists no CapabilityFetch (one released before it) is never sent a
// Fetch: the client says so (ErrFetchUnsupported, for the caller's
// fallback), and the store sees no request.
func TestFetch_OldAgentWithoutTheCapabilityIsNotAsked(t *testing.T) {
	b, _ := entryArchive(t)
	url, requests := serveArchive(t, b)
	var fetches atomic.Int64
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		ours, theirs, err := socketPair()
		if err != nil {
			return nil, err
		}
		go func() {
			cn, _, err := agent.AgentHandshake(ctx, theirs, func(agent.ClientHello) agent.AgentHello {
				return agent.AgentHello{Agent: "old", Run: "run-1", Compression: []string{agent.CompressionZstd}}
			}, 0, 0)
			if err != nil {
				return
			}
			defer cn.Close()
			for f := range cn.Frames() {
				if f.Type == agent.TypeFetch {
					fetches.Add(1)
				}
			}
		}()
		return ours, nil
	}
	cl := agent.NewClient(dial, agent.Options{Name: "test", Logger: discard})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := cl.Fetch(ctx, fetchReq(url, b, map[string]string{"0": filepath.Join(t.TempDir(), "c")}))
	if !errors.Is(err, agent.ErrFetchUnsupported) {
		t.Fatalf("fetch through an old agent: %v, want ErrFetchUnsupported", err)
	}
	if fetches.Load() != 0 || requests.Load() != 0 {
		t.Errorf("the old agent got %d fetches, the store %d requests; want none", fetches.Load(), requests.Load())
	}
}

// socketPair is a connected pair of Unix stream sockets.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

// TestFetch_AFetchCutMidwayIsSentAgainAndUnpacksWhole: when the
// connection to the agent breaks while the agent downloads (an exec
// stream cut), the client sends the request again on a new connection;
// the agent ends the first fetch with its connection (the store sees its
// request cancelled) and removes what it made before the second one
// starts, and the second one unpacks the archive whole.
func TestFetch_AFetchCutMidwayIsSentAgainAndUnpacksWhole(t *testing.T) {
	ta := startAgent(t)
	b, entry := entryArchive(t)
	var requests atomic.Int64
	firstHalf, firstGone := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			_, _ = w.Write(b[:len(b)/2])
			w.(http.Flusher).Flush()
			close(firstHalf)
			<-r.Context().Done() // the agent ended this fetch
			close(firstGone)
			return
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	var conns []net.Conn
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		ours, theirs, err := socketPair()
		if err != nil {
			return nil, err
		}
		conns = append(conns, ours)
		go ta.a.ServeConn(theirs)
		return ours, nil
	}
	cl := agent.NewClient(dial, agent.Options{Name: "test", Logger: discard})
	defer cl.Close()
	go func() {
		<-firstHalf
		_ = conns[0].Close()
	}()
	out := t.TempDir()
	dst0 := filepath.Join(out, "c0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := cl.Fetch(ctx, fetchReq(srv.URL+"/entry.tzst", b, map[string]string{"0": dst0}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-firstGone:
	default:
		t.Error("the first fetch's request was not ended with its connection")
	}
	if requests.Load() != 2 || len(conns) != 2 {
		t.Errorf("%d requests over %d connections, want 2 over 2", requests.Load(), len(conns))
	}
	if got.Bytes != int64(len(b)) {
		t.Errorf("answer %+v", got)
	}
	sameTree(t, filepath.Join(entry, "0"), dst0)
	_ = os.Chmod(filepath.Join(dst0, "ro"), 0o755)
}
