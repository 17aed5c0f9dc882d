package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/objstore/s3test"
)

// entryTree makes a cache entry's directory as the shared store archives
// it: entry.json, member "0" a tree (text, 3 MiB of random bytes, an
// empty file, a subdirectory, a relative link, an executable), member
// "1" a single file.
func entryTree(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	random := make([]byte, 3<<20)
	rand.Read(random)
	for rel, data := range map[string][]byte{
		"entry.json": []byte(`{"repo":"r","key":"k"}`), "0/go.mod": []byte("module x\n"),
		"0/pkg/random.bin": random, "0/pkg/empty": nil, "0/bin/tool": []byte("#!/bin/sh\necho tool\n"),
		"1": []byte("a single file\n"),
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "0", "bin", "tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../go.mod", filepath.Join(dir, "0", "pkg", "link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// putEntry archives dir as the shared store keeps an entry (the agent's
// copy format, zstd; metadata sha256) under name and returns the source
// a fetch reads it from: a presigned URL of the bucket.
func putEntry(t testing.TB, bucket *objstore.Bucket, name, dir string) executor.FetchSource {
	t.Helper()
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
	sum := sha256.Sum256(buf.Bytes())
	ctx := context.Background()
	size := int64(buf.Len())
	if err := bucket.Put(ctx, name, &buf, size, map[string]string{"sha256": hex.EncodeToString(sum[:])}); err != nil {
		t.Fatal(err)
	}
	u, err := bucket.PresignGet(ctx, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return executor.FetchSource{URL: u.String(), Bytes: size, SHA256: hex.EncodeToString(sum[:]), Compression: agent.CompressionZstd}
}

// sameFiles fails unless got holds what want holds: the same names,
// modes, bytes and link targets.
func sameFiles(t testing.TB, want, got string) {
	t.Helper()
	n := 0
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
		n++
		if gi.Mode() != wi.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, gi.Mode(), wi.Mode())
		}
		if wi.Mode()&os.ModeSymlink != 0 {
			wl, _ := os.Readlink(p)
			if gl, _ := os.Readlink(q); gl != wl {
				t.Errorf("%s: link to %q, want %q", rel, gl, wl)
			}
		} else if wi.Mode().IsRegular() {
			wb, _ := os.ReadFile(p)
			if gb, _ := os.ReadFile(q); !bytes.Equal(gb, wb) {
				t.Errorf("%s: %d bytes, not the entry's %d", rel, len(gb), len(wb))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d files, directories and links compared", want, n)
}

// TestKube_PodFetchesAPresignedCacheEntryByteExact: a job pod's step
// agent downloads a shared cache's entry itself, from a presigned URL of
// the real store (versitygw, listening where pods reach this host), and
// unpacks member "0" under HOME and member "1" (a file) in the checkout;
// copied back out through the exec stream, both are the entry's, byte
// for byte, with modes and links; entry.json, not asked for, is nowhere.
func TestKube_PodFetchesAPresignedCacheEntryByteExact(t *testing.T) {
	f := newFixture(t)
	store, err := s3test.Run(t.TempDir(), f.c.HostIP(t)+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Stop)
	bucket := store.Open(t, "fetch")
	entry := entryTree(t)
	src := putEntry(t, bucket, "v1/entry.tzst", entry)
	e := f.executor(t, f.config())
	s := f.prepare(t, e, f.spec(t, runID("fetch")))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	home, err := s.(executor.Cacher).Home(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dst0, dst1 := home+"/.cache/entry0", s.Workdir()+"/tools/one"
	found, err := s.(executor.CacheFetcher).FetchCache(ctx, src, map[string]string{"0": dst0, "1": dst1})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(found, ",") != "0,1" {
		t.Errorf("members found: %v, want 0,1", found)
	}
	back := t.TempDir()
	for dst, local := range map[string]string{dst0: filepath.Join(back, "0"), dst1: filepath.Join(back, "1")} {
		if err := s.CopyOut(ctx, dst, local); err != nil {
			t.Fatal(err)
		}
	}
	sameFiles(t, filepath.Join(entry, "0"), filepath.Join(back, "0"))
	sameFiles(t, filepath.Join(entry, "1"), filepath.Join(back, "1"))
	if _, out, err := runStep(t, s, "find-entry-json", "find / -xdev -name entry.json 2>/dev/null; true", time.Minute); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("entry.json, not a listed member, is in the pod: %s (%v)", out, err)
	}
}

// TestKube_FetchFromAStoreThePodCannotReachFailsSoonAndSaysSo: a
// presigned URL the pod cannot reach (the store listens on this host's
// loopback, which in the pod is the pod's own) fails the fetch at once
// with an error naming the connection and the URL without its signature,
// and leaves nothing at the destination: the runner then restores
// through its own stream. A URL whose address drops every packet (as a
// NetworkPolicy that does not allow the store does) fails once
// connecting took agent.FetchConnectTimeout, not after the stall bound
// or the run's timeout.
func TestKube_FetchFromAStoreThePodCannotReachFailsSoonAndSaysSo(t *testing.T) {
	f := newFixture(t)
	store := s3test.Start(t) // 127.0.0.1 of this host
	bucket := store.Open(t, "fetch")
	src := putEntry(t, bucket, "v1/entry.tzst", entryTree(t))
	e := f.executor(t, f.config())
	s := f.prepare(t, e, f.spec(t, runID("fetch-unreachable")))
	fetcher := s.(executor.CacheFetcher)
	home, err := s.(executor.Cacher).Home(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dst := home + "/.cache/entry0"
	blackhole := src
	blackhole.URL = strings.Replace(src.URL, strings.TrimPrefix(store.URL, "http://"), "192.0.2.1:9", 1)
	for _, c := range []struct {
		name   string
		src    executor.FetchSource
		within time.Duration
		says   string
	}{
		{"loopback", src, 20 * time.Second, "connect: connection refused"},
		{"blackhole", blackhole, agent.FetchConnectTimeout + 20*time.Second, "192.0.2.1:9: i/o timeout"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		start := time.Now()
		_, err := fetcher.FetchCache(ctx, c.src, map[string]string{"0": dst})
		took := time.Since(start)
		cancel()
		t.Logf("%s: after %s: %v", c.name, took.Round(time.Millisecond), err)
		switch {
		case err == nil:
			t.Fatalf("%s: a fetch from a store the pod cannot reach succeeded", c.name)
		case errors.Is(err, executor.ErrFetchUnsupported):
			t.Fatalf("%s: %v: the pod's agent does not fetch", c.name, err)
		case !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "/v1/entry.tzst"):
			t.Errorf("%s: error %q does not say %q and the object", c.name, err, c.says)
		case strings.Contains(err.Error(), "X-Amz-Signature"):
			t.Errorf("%s: the error quotes the URL's signature: %v", c.name, err)
		}
		if took > c.within {
			t.Errorf("%s: failed after %s, want within %s", c.name, took, c.within)
		}
		if _, out, err := runStep(t, s, runID("ls"), "ls -d "+dst+" 2>/dev/null; true", time.Minute); err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("%s: the failed fetch left %s (%v)", c.name, out, err)
		}
	}
}
