package shell_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/cache/cachetest"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/shell"
)

// BenchmarkShell_Cache restores and saves a 200 MiB cache (cachetest.BigTree)
// through the shell executor's session: restore copies from the store
// into the checkout (copy_file_range: extent clones where the file system
// can), save renames the directory from the checkout into the store's
// staging area (same file system). MB/s is of the 200 MiB.
//
//	go test -count=1 -run '^$' -bench 'Shell_Cache' -benchtime 5x ./internal/executor/shell
func BenchmarkShell_Cache(b *testing.B) {
	work := b.TempDir()
	entry := filepath.Join(work, "caches", "entry")
	cachetest.BigTree(b, entry, cachetest.Tree200MB)
	ws := filepath.Join(work, "runs", "1", "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	e := shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(b), Ephemeral: true}, Dir: filepath.Join(work, "shell")})
	s, err := e.Prepare(context.Background(), executor.Spec{ID: "bench", Workspace: ws, Timeout: time.Hour, Log: discard{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	c := s.(executor.Cacher)
	ctx := context.Background()
	dst := filepath.Join(s.Workdir(), "vendor")

	b.Run("restore", func(b *testing.B) {
		b.SetBytes(cachetest.Tree200MB)
		for i := 0; i < b.N; i++ {
			if err := c.RestoreCache(ctx, entry, dst); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := cleanup.RemoveAll(dst, nil); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("save", func(b *testing.B) {
		b.SetBytes(cachetest.Tree200MB)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if err := cache.CopyTree(entry, dst); err != nil {
				b.Fatal(err)
			}
			stage := filepath.Join(work, "caches", "tmp", fmt.Sprint(i))
			b.StartTimer()
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

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
