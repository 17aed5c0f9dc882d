package docker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/cache/cachetest"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/runner"
)

// dockerCacheWorkflow caches a directory of the checkout (bind-mounted:
// moved on the host) and one under HOME (a tmpfs: through the stream).
const dockerCacheWorkflow = `
on: {push: {}}
caches:
  - key: deps-{{ hashFiles "deps.lock" }}
    restore-keys: [deps-]
    paths: [vendor, ~/.cache/tool]
steps:
  - name: build
    run: |
      if [ -f vendor/lib.txt ]; then echo "vendor: $(cat vendor/lib.txt)"; else echo "vendor: cold"; fi
      if [ -f ~/.cache/tool/obj ]; then echo "home: $(cat ~/.cache/tool/obj)"; else echo "home: cold"; fi
      echo "more" >> vendor/lib.txt 2>/dev/null || true
      mkdir -p vendor ~/.cache/tool
      cat deps.lock > vendor/lib.txt
      echo "built from $(cat deps.lock)" > ~/.cache/tool/obj
`

func (f *fixture) runWithCache(t *testing.T, store *cache.Store, repo, lock string) (runner.Result, string) {
	t.Helper()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "deps.lock"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	job := runner.Job{
		Run: 1, Repo: repo, Ref: "refs/heads/main", SHA: strings.Repeat("a", 40),
		ID: fmt.Sprintf("cache-%d", time.Now().UnixNano()%1e9), WorkflowPath: ".knotless/workflows/ci.yml",
		WorkflowSource: []byte(dockerCacheWorkflow), Workspace: ws, Caches: store, Grace: time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res := runner.Execute(ctx, job, f.executor(t, f.config()), &runner.ConsoleReporter{Out: &out, Workflow: "ci"})
	t.Logf("run as %s:\n%s", repo, out.String())
	return res, out.String()
}

func TestDocker_CacheMissThenHitCheckoutOnHostHomeThroughStream(t *testing.T) {
	f := newFixture(t)
	store, err := cache.Open(filepath.Join(t.TempDir(), "caches"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, out := f.runWithCache(t, store, "alice/app", "v1")
	if res.State != api.StateSucceeded || !strings.Contains(out, ": miss;") || !strings.Contains(out, ": saved ") ||
		!strings.Contains(out, "vendor: cold") {
		t.Fatalf("first run: want a miss, a cold step and a save; got %+v", res)
	}
	// The step appends to the restored file as the container's user: the
	// restore gave it the file; the entry stays as saved.
	res, out = f.runWithCache(t, store, "alice/app", "v1")
	if res.State != api.StateSucceeded || !strings.Contains(out, ": hit: restored 2 of 2 paths") ||
		!strings.Contains(out, "vendor: v1") || !strings.Contains(out, "home: built from v1") {
		t.Fatalf("second run: want a hit the step sees; got %+v", res)
	}
	e, _, release := store.Lookup("alice/app", []string{"vendor", "~/.cache/tool"}, "", []string{"deps-"})
	defer release()
	if b, err := os.ReadFile(filepath.Join(e.PathDir(0), "lib.txt")); err != nil || string(b) != "v1" {
		t.Fatalf("the entry changed under a step: %q %v", b, err)
	}
	res, out = f.runWithCache(t, store, "mallory/app", "v1")
	if res.State != api.StateSucceeded || !strings.Contains(out, ": miss;") || !strings.Contains(out, "vendor: cold") {
		t.Fatalf("another repository's run got alice/app's cache; got %+v", res)
	}
}

// BenchmarkDocker_Cache restores and saves a 200 MiB cache
// (cachetest.BigTree) in a job container: into and out of the
// bind-mounted checkout on the host (copy_file_range; rename), and into
// and out of HOME (a tmpfs) through the agent's stream with zstd.
//
//	KNOTLESS_TEST_DOCKER_REQUIRED=1 go test -count=1 -run '^$' -bench 'Docker_Cache' -benchtime 3x ./internal/executor/docker
func BenchmarkDocker_Cache(b *testing.B) {
	f := newFixture(b)
	work := b.TempDir()
	entry := filepath.Join(work, "caches", "entry")
	cachetest.BigTree(b, entry, cachetest.Tree200MB)
	ws := filepath.Join(work, "runs", "1", "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	cfg := f.config()
	cfg.Memory = 1 << 30
	s, err := f.executor(b, cfg).Prepare(context.Background(), executor.Spec{ID: "bench", Workspace: ws, Timeout: time.Hour, Log: io.Discard})
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
	for _, where := range []struct{ name, dst string }{{"checkout", s.Workdir() + "/vendor"}, {"home", home + "/.cache/bench"}} {
		b.Run("restore-"+where.name, func(b *testing.B) {
			b.SetBytes(cachetest.Tree200MB)
			for i := 0; i < b.N; i++ {
				if err := c.RestoreCache(ctx, entry, where.dst); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				res, err := s.Exec(ctx, executor.Step{ID: fmt.Sprintf("rm-%s-%d", where.name, i), Script: "rm -rf " + where.dst}, io.Discard)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("rm: %+v %v", res, err)
				}
				b.StartTimer()
			}
		})
		b.Run("save-"+where.name, func(b *testing.B) {
			b.SetBytes(cachetest.Tree200MB)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if err := c.RestoreCache(ctx, entry, where.dst); err != nil {
					b.Fatal(err)
				}
				stage := filepath.Join(work, "caches", "tmp", fmt.Sprint(where.name, i))
				b.StartTimer()
				if err := c.SaveCache(ctx, where.dst, stage); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := cleanup.RemoveAll(stage, nil); err != nil {
					b.Fatal(err)
				}
				res, err := s.Exec(ctx, executor.Step{ID: fmt.Sprintf("rm-save-%s-%d", where.name, i), Script: "rm -rf " + where.dst}, io.Discard)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("rm: %+v %v", res, err)
				}
				b.StartTimer()
			}
		})
	}
}
