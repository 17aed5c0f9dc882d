package runner

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/objstore/s3test"
)

// sharedTestStore is a runner's cache store in a new work directory,
// sharing the bucket cfg names, with bounds short enough for tests.
func sharedTestStore(t *testing.T, cfg objstore.Config) *cache.Store {
	t.Helper()
	store := openTestStore(t, 0)
	b, err := objstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	store.Configure(cache.Options{Bucket: b, LookupTimeout: 3 * time.Second, IdleTimeout: 2 * time.Second, TransferTimeout: 20 * time.Second})
	t.Cleanup(store.Wait)
	return store
}

// Two runners of one repository, each with its own (empty) work
// directory: the second restores what the first saved, through the store.
func TestCaches_ASecondRunnerHitsWhatTheFirstSavedThroughTheStore(t *testing.T) {
	s := s3test.Start(t)
	ctx := context.Background()
	first, second := sharedTestStore(t, s.Config("caches")), sharedTestStore(t, s.Config("caches"))
	rep, res := execute(t, ctx, cacheJob(t, first, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	if setup := rep.log(0); !strings.Contains(setup, ": miss;") || !strings.Contains(setup, "uploaded to the cache store as ") {
		t.Fatalf("first runner: want a miss and an upload:\n%s", setup)
	}
	rep, res = execute(t, ctx, cacheJob(t, second, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	setup := rep.log(0)
	t.Logf("second runner's setup log:\n%s", setup)
	if !strings.Contains(setup, ": hit (downloaded ") || !strings.Contains(setup, "restored 2 of 2 paths") {
		t.Fatalf("second runner: want a downloaded hit:\n%s", setup)
	}
	if got := rep.log(1); !strings.Contains(got, "vendor: v1") || !strings.Contains(got, "home: built from v1") {
		t.Fatalf("second runner's step did not see the cache:\n%s", got)
	}
	// A partial hit through the store, on a third runner.
	third := sharedTestStore(t, s.Config("caches"))
	rep, res = execute(t, ctx, cacheJob(t, third, "alice/app", "v2", cacheWorkflow))
	mustSucceed(t, rep, res)
	if setup := rep.log(0); !strings.Contains(setup, ": partial hit by restore key, entry deps-") || !strings.Contains(setup, "uploaded to the cache store") {
		t.Fatalf("third runner: want a partial hit and an upload:\n%s", setup)
	}
	// Another repository's run on the second runner finds nothing.
	rep, res = execute(t, ctx, cacheJob(t, second, "mallory/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	if got := rep.log(1); !strings.Contains(got, "vendor: cold") {
		t.Fatalf("alice/app's cache reached mallory/app's run:\n%s", got)
	}
}

// Each way a store fails: the run succeeds (cold, saved on its own disk
// only), its setup log says what happened, and the store holds it up only
// for the bounds.
func TestCaches_AFailingStoreNeverFailsARun(t *testing.T) {
	s := s3test.Start(t)
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) objstore.Config
		want  string
	}{
		{"down", func(t *testing.T) objstore.Config {
			p := s3test.NewProxy(t, s)
			cfg := s.Config("")
			cfg.URL = p.BucketURL(s, "")
			p.Fail(-1, http.StatusBadGateway, "")
			return cfg
		}, "the store failed (HTTP 502"},
		{"unreachable", func(t *testing.T) objstore.Config {
			cfg := s.Config("")
			cfg.URL = "http://127.0.0.1:1/knotless"
			return cfg
		}, "the store is unreachable"},
		{"wrong credentials", func(t *testing.T) objstore.Config {
			cfg := s.Config("")
			cfg.Credentials = credentials.NewStaticV4(s.AccessKey, "wrong-secret", "")
			return cfg
		}, "the store refuses the credentials"},
		{"no bucket", func(t *testing.T) objstore.Config {
			cfg := s.Config("")
			cfg.URL = s.BucketURL(s.URL, "") + "-missing"
			return cfg
		}, "the bucket does not exist"},
		{"503 storm", func(t *testing.T) objstore.Config {
			p := s3test.NewProxy(t, s)
			cfg := s.Config("")
			cfg.URL = p.BucketURL(s, "")
			p.Fail(-1, http.StatusServiceUnavailable, "SlowDown")
			return cfg
		}, "the store is overloaded or failing (SlowDown"},
		{"full", func(t *testing.T) objstore.Config {
			p := s3test.NewProxy(t, s)
			cfg := s.Config("")
			cfg.URL = p.BucketURL(s, "")
			p.Fail(-1, http.StatusInsufficientStorage, "XMinioStorageFull")
			return cfg
		}, "the store is full"},
		{"stalled", func(t *testing.T) objstore.Config {
			p := s3test.NewProxy(t, s)
			cfg := s.Config("")
			cfg.URL = p.BucketURL(s, "")
			p.Stall(time.Minute)
			return cfg
		}, "the store did not answer in time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := sharedTestStore(t, c.setup(t))
			start := time.Now()
			rep, res := execute(t, context.Background(), cacheJob(t, store, "alice/app", "v1", cacheWorkflow))
			took := time.Since(start)
			mustSucceed(t, rep, res)
			setup := rep.log(0)
			t.Logf("%s, setup log:\n%s", took, setup)
			var missLine, saveLine string
			for _, l := range strings.Split(setup, "\n") {
				if strings.Contains(l, ": miss (the cache store could not be used: ") {
					missLine = l
				}
				if strings.Contains(l, ": saved ") && strings.Contains(l, "on this runner's disk only (not uploaded: ") {
					saveLine = l
				}
			}
			if !strings.Contains(missLine, c.want) || !strings.Contains(saveLine, c.want) {
				t.Fatalf("want a miss line and a save line saying %q:\n%s", c.want, setup)
			}
			if !store.Has("alice/app", []string{"vendor", "~/.cache/tool"}, "deps-"+hashOf(t, "v1")) {
				t.Fatal("the entry was not kept on the runner's disk")
			}
			if took > 30*time.Second {
				t.Fatalf("the failing store held the run for %s", took)
			}
		})
	}
}

// hashOf is hashFiles of a checkout holding deps.lock with lock.
func hashOf(t *testing.T, lock string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "deps.lock"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, _, err := cache.HashFiles(dir, "deps.lock")
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// The store killed while a runner downloads: the run goes on cold, and
// once the store is back a runner hits.
func TestCaches_AStoreKilledMidRestoreLeavesTheRunColdAndWhole(t *testing.T) {
	s := s3test.Start(t)
	ctx := context.Background()
	wf := strings.Replace(cacheWorkflow, "cat deps.lock > vendor/lib.txt", "cat deps.lock > vendor/lib.txt; head -c 16000000 /dev/urandom > vendor/big", 1)
	rep, res := execute(t, ctx, cacheJob(t, sharedTestStore(t, s.Config("")), "alice/app", "v1", wf))
	mustSucceed(t, rep, res)
	p := s3test.NewProxy(t, s)
	cfg := s.Config("")
	cfg.URL = p.BucketURL(s, "")
	p.AfterBytes(1<<20, s.Kill)
	rep, res = execute(t, ctx, cacheJob(t, sharedTestStore(t, cfg), "alice/app", "v1", wf))
	mustSucceed(t, rep, res)
	setup := rep.log(0)
	t.Logf("setup log:\n%s", setup)
	if !strings.Contains(setup, ": miss (the cache store could not be used: ") {
		t.Fatalf("want a miss that says the store failed:\n%s", setup)
	}
	if got := rep.log(1); !strings.Contains(got, "vendor: cold") {
		t.Fatalf("a half download reached the step:\n%s", got)
	}
	s.Restart(t)
	rep, res = execute(t, ctx, cacheJob(t, sharedTestStore(t, s.Config("")), "alice/app", "v1", wf))
	mustSucceed(t, rep, res)
	if got := rep.log(1); !strings.Contains(got, "vendor: v1") {
		t.Fatalf("after the restart:\n%s\n%s", rep.log(0), got)
	}
}

// A byte changed in the store: the run says so, goes on cold and saves
// the key anew.
func TestCaches_ADamagedStoreEntryIsAMissThatSaysSo(t *testing.T) {
	s := s3test.Start(t)
	ctx := context.Background()
	rep, res := execute(t, ctx, cacheJob(t, sharedTestStore(t, s.Config("")), "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	var obj string
	filepath.WalkDir(filepath.Join(s.Dir, s.Bucket), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".tzst") {
			obj = p
		}
		return nil
	})
	raw, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-20] ^= 0xff
	if err := os.WriteFile(obj, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, res = execute(t, ctx, cacheJob(t, sharedTestStore(t, s.Config("")), "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	setup := rep.log(0)
	t.Logf("setup log:\n%s", setup)
	if !strings.Contains(setup, ": miss (the cache store's entry was damaged: ") || !strings.Contains(setup, "uploaded to the cache store") {
		t.Fatalf("want a miss saying the entry was damaged, then an upload:\n%s", setup)
	}
	if got := rep.log(1); !strings.Contains(got, "vendor: cold") {
		t.Fatalf("a damaged entry reached the step:\n%s", got)
	}
}

// Through the runner's loop and a real server: a runner started on a new,
// empty work directory (one that replaced another) hits what the first
// saved, through Config.CacheOptions' bucket.
func TestIntegration_ARunnerOnANewWorkDirectoryHitsWhatTheFirstSaved(t *testing.T) {
	w := newWorld(t, true)
	s := s3test.Start(t)
	b, err := objstore.Open(s.Config("caches"))
	if err != nil {
		t.Fatal(err)
	}
	onNewDisk := func(cfg *Config) {
		cfg.WorkDir = filepath.Join(t.TempDir(), "work")
		cfg.Executor = shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true, Logger: cfg.Logger}, Dir: filepath.Join(cfg.WorkDir, "shell")})
		cfg.CacheOptions = cache.Options{Bucket: b, UnusedFor: 7 * 24 * time.Hour}
	}
	files := map[string]string{"deps.lock": "v1", ".knotless/workflows/ci.yml": cacheWorkflow}
	stop := w.startRunner(onNewDisk)
	run := w.push(files)
	if final := w.waitFinal(run.ID, 60*time.Second); final.State != api.StateSucceeded {
		t.Fatalf("first run %+v\n%s", final, w.stepLog(run.ID, 0))
	}
	if setup := string(w.stepLog(run.ID, 0)); !strings.Contains(setup, "uploaded to the cache store") {
		t.Fatalf("first run did not upload:\n%s", setup)
	}
	stop()
	w.startRunner(onNewDisk)
	files["other.txt"] = "a new commit"
	run = w.push(files)
	if final := w.waitFinal(run.ID, 60*time.Second); final.State != api.StateSucceeded {
		t.Fatalf("second run %+v\n%s", final, w.stepLog(run.ID, 0))
	}
	if setup := string(w.stepLog(run.ID, 0)); !strings.Contains(setup, ": hit (downloaded ") {
		t.Fatalf("the runner on a new disk did not hit:\n%s", setup)
	}
	if got := string(w.stepLog(run.ID, 1)); !strings.Contains(got, "vendor: v1") {
		t.Fatalf("the step did not see the cache:\n%s", got)
	}
}

// A run with caches: reports its repository's use of the store, the
// bucket's when there is one (what every runner of it reports alike).
func TestCaches_ARunReportsItsRepositorysUseOfTheStore(t *testing.T) {
	ctx := context.Background()
	disk := openTestStore(t, 0)
	rep, res := execute(t, ctx, cacheJob(t, disk, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	if u := res.Caches; u == nil || u.Entries != 1 || u.Bytes != 16 || !strings.HasSuffix(u.Store, ": disk") {
		t.Fatalf("disk usage %+v", u)
	}
	s := s3test.Start(t)
	shared := sharedTestStore(t, s.Config("c"))
	for _, lock := range []string{"v1", "v2"} {
		rep, res = execute(t, ctx, cacheJob(t, shared, "alice/app", lock, cacheWorkflow))
		mustSucceed(t, rep, res)
	}
	if u := res.Caches; u == nil || u.Entries != 2 || u.Bytes < 100 || u.Store != "s3: "+shared.Bucket().String() {
		t.Fatalf("bucket usage %+v", u)
	}
	rep, res = execute(t, ctx, testJob(t, "on: {push: {}}\nsteps:\n  - run: echo hi\n"))
	mustSucceed(t, rep, res)
	if res.Caches != nil {
		t.Fatalf("a run without caches: reported %+v", res.Caches)
	}
}

// With --cache-store-direct, a runner holding no copy of the entry has
// the job's environment download it from a presigned URL (the step agent
// fetches, unpacks and checks it): the runner's own disk gets no copy,
// and the step sees the cache whole. The failure it pins: the direct
// route restoring nothing, or the runner downloading the entry anyway.
func TestCaches_ADirectStoreHasTheJobDownloadTheEntryItself(t *testing.T) {
	s := s3test.Start(t)
	ctx := context.Background()
	first := sharedTestStore(t, s.Config("caches"))
	rep, res := execute(t, ctx, cacheJob(t, first, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	second := openTestStore(t, 0)
	b, err := objstore.Open(s.Config("caches"))
	if err != nil {
		t.Fatal(err)
	}
	second.Configure(cache.Options{Bucket: b, Direct: true, LookupTimeout: 3 * time.Second, IdleTimeout: 2 * time.Second, TransferTimeout: 20 * time.Second})
	t.Cleanup(second.Wait)
	rep, res = execute(t, ctx, cacheJob(t, second, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	setup := rep.log(0)
	t.Logf("second runner's setup log:\n%s", setup)
	if !strings.Contains(setup, ": hit (downloaded ") || !strings.Contains(setup, " by the job from the cache store): restored 2 of 2 paths") {
		t.Fatalf("second runner: want a hit the job downloaded:\n%s", setup)
	}
	if got := rep.log(1); !strings.Contains(got, "vendor: v1") || !strings.Contains(got, "home: built from v1") {
		t.Fatalf("the step did not see the cache the job downloaded:\n%s", got)
	}
	if es := second.Entries(); len(es) != 0 {
		t.Errorf("the runner's disk holds %d entries: the runner downloaded the entry too", len(es))
	}
}
