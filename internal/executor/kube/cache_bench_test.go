package kube_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/cache/cachetest"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor"
)

// BenchmarkKube_Cache restores and saves a 200 MiB cache
// (cachetest.BigTree: half random, half text) between the runner's disk
// and a job pod (1 cpu, 512 MiB, 1 GiB disk) through the agent's stream:
// a tar stream compressed with zstd, its length and SHA-256 compared by
// both ends. MB/s is of the 200 MiB.
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench 'Kube_Cache' -benchtime 3x ./internal/executor/kube
func BenchmarkKube_Cache(b *testing.B) {
	f := newFixture(b)
	entry := filepath.Join(b.TempDir(), "entry")
	cachetest.BigTree(b, entry, cachetest.Tree200MB)
	s, _ := benchSession(b, f, "")
	c := s.(executor.Cacher)
	ctx := context.Background()
	home, err := c.Home(ctx)
	if err != nil {
		b.Fatal(err)
	}
	dst := home + "/.cache/bench"
	b.Run("restore", func(b *testing.B) {
		b.SetBytes(cachetest.Tree200MB)
		for i := 0; i < b.N; i++ {
			if err := c.RestoreCache(ctx, entry, dst); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			execOK(b, s, fmt.Sprintf("rm-%d", i), "rm -rf "+dst, io.Discard)
			b.StartTimer()
		}
	})
	if err := c.RestoreCache(ctx, entry, dst); err != nil {
		b.Fatal(err)
	}
	// The same copies without compression, for comparison.
	cl := s.(interface{ Client() *agent.Client }).Client()
	b.Run("restore-uncompressed", func(b *testing.B) {
		b.SetBytes(cachetest.Tree200MB)
		for i := 0; i < b.N; i++ {
			_, err := cl.CopyInWith(ctx, agent.CopyIn{Dst: dst + "-plain"}, func(w io.Writer) error {
				return agent.WriteTar(ctx, w, agent.HostTree{}, entry)
			})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			execOK(b, s, fmt.Sprintf("rm-plain-%d", i), "rm -rf "+dst+"-plain", io.Discard)
			b.StartTimer()
		}
	})
	stages := b.TempDir()
	b.Run("save-uncompressed", func(b *testing.B) {
		b.SetBytes(cachetest.Tree200MB)
		for i := 0; i < b.N; i++ {
			stage := filepath.Join(stages, fmt.Sprint("plain", i))
			err := cl.CopyOutWith(ctx, agent.CopyOut{Src: dst}, func(r io.Reader) error {
				_, err := agent.ExtractTar(ctx, r, agent.HostTree{}, stage)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := cleanup.RemoveAll(stage, nil); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("save", func(b *testing.B) {
		b.SetBytes(cachetest.Tree200MB)
		for i := 0; i < b.N; i++ {
			stage := filepath.Join(stages, fmt.Sprint(i))
			if err := c.SaveCache(ctx, dst, stage); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := cleanup.RemoveAll(stage, nil); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}
