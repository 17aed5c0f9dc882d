package kube_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/runner"
)

// kubeCacheWorkflow caches a directory of the checkout and one under HOME.
const kubeCacheWorkflow = `
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
      mkdir -p vendor ~/.cache/tool
      cat deps.lock > vendor/lib.txt
      echo "built from $(cat deps.lock)" > ~/.cache/tool/obj
`

// runWithCache executes wf in a job pod through the runner's core with the
// cache store, as repo with deps.lock holding lock; it returns the whole
// console output (setup log, step logs, summary).
func (f *fixture) runWithCache(t *testing.T, store *cache.Store, repo, lock string) (runner.Result, string) {
	t.Helper()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "deps.lock"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	e := f.executor(t, f.config())
	var out bytes.Buffer
	job := runner.Job{
		Run: 1, Repo: repo, Ref: "refs/heads/main", SHA: strings.Repeat("a", 40),
		ID: runID("cache"), WorkflowPath: ".knotless/workflows/ci.yml", WorkflowSource: []byte(kubeCacheWorkflow),
		Workspace: ws, Caches: store, Grace: time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res := runner.Execute(ctx, job, e, &runner.ConsoleReporter{Out: &out, Workflow: "ci"})
	t.Logf("run as %s:\n%s", repo, out.String())
	return res, out.String()
}

func TestKube_CacheMissThenHitThroughTheAgentStream(t *testing.T) {
	f := newFixture(t)
	store, err := cache.Open(filepath.Join(t.TempDir(), "caches"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, out := f.runWithCache(t, store, "alice/app", "v1")
	if res.State != api.StateSucceeded || !strings.Contains(out, ": miss;") || !strings.Contains(out, ": saved ") ||
		!strings.Contains(out, "vendor: cold") || !strings.Contains(out, "home: cold") {
		t.Fatalf("first run: want a miss, a cold step and a save; got %+v", res)
	}
	res, out = f.runWithCache(t, store, "alice/app", "v1")
	if res.State != api.StateSucceeded || !strings.Contains(out, ": hit: restored 2 of 2 paths") ||
		!strings.Contains(out, "vendor: v1") || !strings.Contains(out, "home: built from v1") ||
		!strings.Contains(out, "not saved: the key was an exact hit") {
		t.Fatalf("second run: want a hit the step sees, and no save; got %+v", res)
	}
	res, out = f.runWithCache(t, store, "alice/app", "v2")
	if res.State != api.StateSucceeded || !strings.Contains(out, ": partial hit by restore key") || !strings.Contains(out, "vendor: v1") {
		t.Fatalf("third run: want a partial hit by restore key; got %+v", res)
	}
	res, out = f.runWithCache(t, store, "mallory/app", "v1")
	if res.State != api.StateSucceeded || !strings.Contains(out, ": miss;") || !strings.Contains(out, "vendor: cold") {
		t.Fatalf("another repository's run got alice/app's cache; got %+v", res)
	}
}
