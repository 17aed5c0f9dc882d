package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/objstore/s3test"
)

// BenchmarkKube_SharedCacheRestore is the figure behind the shared
// caches' route (docs/benchmarks.md "Shared cache figures"): a cache kept
// in an S3-compatible store (the tests' versitygw, on the address pods
// reach this host at) restored into a job pod (1 cpu, 512 MiB), two
// kinds of bytes (text: files of the Go module cache; random), as MB/s of
// the tree:
//
//   - download: the archive (tar, zstd) read from the store with the
//     runners' client (objstore, minio-go) into nothing: the floor of any
//     route through the runner;
//   - tar-x: `zstd -d | tar -x` of the same archive on the node: the
//     floor of unpacking it;
//   - exec-stream: the tree, already on the runner's disk, into the pod
//     over the agent's stream (zstd), the route the runner takes after
//     the download, as restores from its own disk always did;
//   - pod-download: the pod itself reading a presigned URL of the
//     uncompressed tar with busybox wget and unpacking it with busybox
//     tar, the route presigned URLs would give where the pod may reach
//     the store;
//   - runner-hit: a second runner's hit of what a first one saved
//     (cache.Store with the bucket, an empty disk): Find downloads the
//     entry, checks and unpacks it on the runner's disk, then the runner
//     streams it into the pod as exec-stream does: the whole route
//     without --cache-store-direct;
//   - agent-fetch: the route presigned URLs give: the store's own entry
//     (entry.json and the tree as member "0", agent.WriteTar, zstd at
//     the store's level) fetched by the pod's step agent from a presigned
//     URL, hashed and unpacked as it arrives (executor.CacheFetcher).
//
// KNOTLESS_BENCH_CACHE_MB sizes each tree (default 8; the documented
// figures use 1024).
//
//	KNOTLESS_BENCH_CACHE_MB=1024 KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench 'Kube_SharedCacheRestore' -benchtime 3x -timeout 60m ./internal/executor/kube
func BenchmarkKube_SharedCacheRestore(b *testing.B) {
	size := int64(8) << 20
	if v := os.Getenv("KNOTLESS_BENCH_CACHE_MB"); v != "" {
		mb, err := strconv.Atoi(v)
		if err != nil || mb < 1 {
			b.Fatalf("KNOTLESS_BENCH_CACHE_MB=%q: want a number of MiB", v)
		}
		size = int64(mb) << 20
	}
	f := newFixture(b)
	store, err := s3test.Run(b.TempDir(), f.c.HostIP(b)+":0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Stop)
	bucket := store.Open(b, "bench")
	cfg := f.config()
	cfg.CPUs, cfg.Memory, cfg.Disk = "1", 512<<20, 4*size+(256<<20)
	e := f.executor(b, cfg)
	s, err := e.Prepare(context.Background(), executor.Spec{ID: fmt.Sprintf("bench-%d", time.Now().UnixNano()), Workspace: b.TempDir(), Timeout: time.Hour, Log: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	c := s.(executor.Cacher)
	ctx := context.Background()
	home, err := c.Home(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, kind := range []string{"text", "random"} {
		tree := filepath.Join(b.TempDir(), kind)
		if kind == "text" {
			moduleCacheTree(b, tree, size)
		} else {
			randomTree(b, tree, size)
		}
		work := b.TempDir()
		zst, plain := filepath.Join(work, "a.tar.zst"), filepath.Join(work, "a.tar")
		sh(b, "tar -C "+tree+" -cf "+plain+" . && zstd -q -1 -T0 -o "+zst+" "+plain)
		for name, p := range map[string]string{kind + ".tar.zst": zst, kind + ".tar": plain} {
			fh, err := os.Open(p)
			if err != nil {
				b.Fatal(err)
			}
			fi, _ := fh.Stat()
			if err := bucket.Put(ctx, name, fh, fi.Size(), nil); err != nil {
				b.Fatal(err)
			}
			fh.Close()
		}
		b.Run(kind+"/download", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				r, _, err := bucket.Get(ctx, kind+".tar.zst", 0)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
		b.Run(kind+"/tar-x", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				dst := filepath.Join(work, "x"+strconv.Itoa(i))
				sh(b, "mkdir "+dst+" && zstd -q -dc "+zst+" | tar -C "+dst+" -x")
				b.StopTimer()
				os.RemoveAll(dst)
				b.StartTimer()
			}
		})
		b.Run(kind+"/exec-stream", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				dst := home + "/.cache/" + kind
				if err := c.RestoreCache(ctx, tree, dst); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				execOK(b, s, fmt.Sprintf("rm-%s-%d", kind, i), "rm -rf "+dst, io.Discard)
				b.StartTimer()
			}
		})
		u, err := bucket.PresignGet(ctx, kind+".tar", time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(kind+"/pod-download", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				dst := home + "/.cache/" + kind + "-pod"
				var out bytes.Buffer
				res, err := s.Exec(ctx, executor.Step{ID: fmt.Sprintf("dl-%s-%d", kind, i),
					Script: "mkdir -p " + dst + " && wget -q -O - '" + u.String() + "' | tar -C " + dst + " -x"}, &out)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("the pod's download: %+v, %v: %s", res, err, out.String())
				}
				b.StopTimer()
				execOK(b, s, fmt.Sprintf("rm-dl-%s-%d", kind, i), "rm -rf "+dst, io.Discard)
				b.StartTimer()
			}
		})
		runnerHit(b, ctx, bucket, c, s, kind, tree, home+"/.cache/"+kind+"-hit", size)
		src := putStoreEntry(b, bucket, kind+".entry.tzst", tree)
		b.Run(kind+"/agent-fetch", func(b *testing.B) {
			b.SetBytes(size)
			fetcher := s.(executor.CacheFetcher)
			for i := 0; i < b.N; i++ {
				dst := home + "/.cache/" + kind + "-fetch"
				if _, err := fetcher.FetchCache(ctx, src, map[string]string{"0": dst}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				execOK(b, s, fmt.Sprintf("rm-fetch-%s-%d", kind, i), "rm -rf "+dst, io.Discard)
				b.StartTimer()
			}
		})
	}
}

// putStoreEntry puts tree into bucket at name as the shared cache store
// keeps an entry whose one path is tree (internal/cache: a directory of
// entry.json and "0", written with agent.WriteTar and compressed with
// zstd at its default level; metadata sha256), and returns the source
// the agent's fetch reads it from (a presigned URL).
func putStoreEntry(b *testing.B, bucket *objstore.Bucket, name, tree string) executor.FetchSource {
	b.Helper()
	entry := b.TempDir()
	sh(b, "cp -al "+tree+" "+entry+"/0 && echo '{}' >"+entry+"/entry.json")
	f, err := os.Create(filepath.Join(b.TempDir(), "entry.tzst"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	zw, err := zstd.NewWriter(io.MultiWriter(f, h), zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2))
	if err != nil {
		b.Fatal(err)
	}
	if err := agent.WriteTar(context.Background(), zw, agent.HostTree{}, entry); err != nil {
		b.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	size, _ := f.Seek(0, io.SeekCurrent)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		b.Fatal(err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	ctx := context.Background()
	if err := bucket.Put(ctx, name, f, size, map[string]string{"sha256": sum}); err != nil {
		b.Fatal(err)
	}
	u, err := bucket.PresignGet(ctx, name, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: the store's entry is %d bytes (zstd)", name, size)
	return executor.FetchSource{URL: u.String(), Bytes: size, SHA256: sum, Compression: agent.CompressionZstd}
}

// moduleCacheTree copies regular files of the Go module cache (`go env
// GOMODCACHE`: source text) into dir until size bytes; it fails the
// benchmark when the cache holds less.
func moduleCacheTree(b *testing.B, dir string, size int64) {
	b.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		b.Fatal(err)
	}
	src := strings.TrimSpace(string(out))
	var n int64
	errFull := fmt.Errorf("full")
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() || strings.HasPrefix(p, filepath.Join(src, "cache")) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		if n+int64(len(data)) > size {
			data = data[:size-n]
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
		n += int64(len(data))
		if n >= size {
			return errFull
		}
		return nil
	})
	if err != nil && err != errFull {
		b.Fatal(err)
	}
	if n < size {
		b.Fatalf("the Go module cache %s holds %d bytes of files, fewer than %d", src, n, size)
	}
}

// randomTree writes size random bytes under dir in files of 1 MiB (the
// last one shorter).
func randomTree(b *testing.B, dir string, size int64) {
	b.Helper()
	buf := make([]byte, 1<<20)
	for i := int64(0); i*int64(len(buf)) < size; i++ {
		n := min(int64(len(buf)), size-i*int64(len(buf)))
		rand.Read(buf[:n])
		p := filepath.Join(dir, fmt.Sprint(i%10), fmt.Sprintf("f%d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf[:n], 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func sh(b *testing.B, script string) {
	b.Helper()
	if out, err := exec.Command("bash", "-c", "set -eo pipefail; "+script).CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// runnerHit measures a second runner's hit (see the benchmark's doc): a
// first store saves tree as repo bench/app's key kind into the bucket,
// then each iteration a store on a new empty directory finds it there and
// restores it into the pod at dst.
func runnerHit(b *testing.B, ctx context.Context, bucket *objstore.Bucket, c executor.Cacher, s executor.Session, kind, tree, dst string, size int64) {
	b.Helper()
	paths := []string{"~/.cache/" + kind}
	first, err := cache.Open(b.TempDir(), 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	first.Configure(cache.Options{Bucket: bucket})
	stage, err := first.Begin("bench/app", kind, paths)
	if err != nil {
		b.Fatal(err)
	}
	if err := cache.CopyTree(tree, stage.PathDir(0)); err != nil {
		b.Fatal(err)
	}
	ent, _, err := stage.Commit()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := first.Upload(ctx, ent); err != nil {
		b.Fatal(err)
	}
	b.Run(kind+"/runner-hit", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			second, err := cache.Open(b.TempDir(), 0, nil)
			if err != nil {
				b.Fatal(err)
			}
			second.Configure(cache.Options{Bucket: bucket})
			b.StartTimer()
			found := second.Find(ctx, "bench/app", paths, kind, nil)
			if found.Match != cache.Hit || !found.Downloaded {
				b.Fatalf("the second runner's Find: %v, downloaded %v, fault %v", found.Match, found.Downloaded, found.Fault)
			}
			if err := c.RestoreCache(ctx, found.Entry.PathDir(0), dst); err != nil {
				b.Fatal(err)
			}
			found.Release()
			b.StopTimer()
			execOK(b, s, fmt.Sprintf("rm-hit-%s-%d", kind, i), "rm -rf "+dst, io.Discard)
			b.StartTimer()
		}
	})
}
