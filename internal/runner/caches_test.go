package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testenv"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/internal/workflow"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/shell"
)

const cacheWorkflow = `
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

// cacheJob is a job of repo whose checkout holds deps.lock with lock, using
// store.
func cacheJob(t *testing.T, store *cache.Store, repo, lock, wf string) Job {
	t.Helper()
	job := testJob(t, wf)
	job.Repo, job.Caches = repo, store
	if err := os.WriteFile(filepath.Join(job.Workspace, "deps.lock"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	return job
}

func openTestStore(t *testing.T, limit int64) *cache.Store {
	t.Helper()
	s, err := cache.Open(filepath.Join(t.TempDir(), "caches"), limit, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSucceed(t *testing.T, rep *memReporter, res Result) {
	t.Helper()
	if res.State != api.StateSucceeded {
		t.Fatalf("run %+v\nsetup log:\n%s\nstep log:\n%s", res, rep.log(0), rep.log(1))
	}
}

func TestCaches_Shell_MissThenHit(t *testing.T) {
	store := openTestStore(t, 0)
	ctx := context.Background()
	rep, res := execute(t, ctx, cacheJob(t, store, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	setup := rep.log(0)
	if !strings.Contains(setup, ": miss;") || !strings.Contains(setup, ": saved ") {
		t.Fatalf("first run: want a miss and a save:\n%s", setup)
	}
	if got := rep.log(1); !strings.Contains(got, "vendor: cold") || !strings.Contains(got, "home: cold") {
		t.Fatalf("first run's step saw a cache:\n%s", got)
	}
	if strings.Contains(setup, "not implemented") || strings.Contains(setup, "not supported") {
		t.Fatalf("setup log still says caches do not work:\n%s", setup)
	}

	rep, res = execute(t, ctx, cacheJob(t, store, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	setup = rep.log(0)
	t.Logf("second run's setup log:\n%s", setup)
	if !strings.Contains(setup, ": hit: restored 2 of 2 paths") || !strings.Contains(setup, "not saved: the key was an exact hit") {
		t.Fatalf("second run: want a hit and no save:\n%s", setup)
	}
	if got := rep.log(1); !strings.Contains(got, "vendor: v1") || !strings.Contains(got, "home: built from v1") {
		t.Fatalf("second run's step did not see the cache:\n%s", got)
	}
	if n := len(store.Entries()); n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}
}

func TestCaches_Shell_PartialHitByRestoreKeyThenSavesNewKey(t *testing.T) {
	store := openTestStore(t, 0)
	ctx := context.Background()
	rep, res := execute(t, ctx, cacheJob(t, store, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	rep, res = execute(t, ctx, cacheJob(t, store, "alice/app", "v2", cacheWorkflow))
	mustSucceed(t, rep, res)
	setup := rep.log(0)
	if !strings.Contains(setup, ": partial hit by restore key, entry deps-") || !strings.Contains(setup, ": saved ") {
		t.Fatalf("want a partial hit, then a save of the new key:\n%s", setup)
	}
	if got := rep.log(1); !strings.Contains(got, "vendor: v1") {
		t.Fatalf("the step did not get the older entry:\n%s", got)
	}
	if n := len(store.Entries()); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
}

func TestCaches_NotRestoredIntoAnotherRepositorysRun(t *testing.T) {
	store := openTestStore(t, 0)
	ctx := context.Background()
	rep, res := execute(t, ctx, cacheJob(t, store, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	// Same key, same restore keys, another repository on the same runner disk.
	rep, res = execute(t, ctx, cacheJob(t, store, "mallory/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	if setup := rep.log(0); !strings.Contains(setup, ": miss;") {
		t.Fatalf("another repository's run did not miss:\n%s", setup)
	}
	if got := rep.log(1); !strings.Contains(got, "vendor: cold") || !strings.Contains(got, "home: cold") {
		t.Fatalf("alice/app's cache reached mallory/app's run:\n%s", got)
	}
}

func TestCaches_FailedRunSavesNothing(t *testing.T) {
	store := openTestStore(t, 0)
	wf := cacheWorkflow + "  - run: exit 3\n"
	rep, res := execute(t, context.Background(), cacheJob(t, store, "alice/app", "v1", wf))
	if res.State != api.StateFailed {
		t.Fatalf("run %+v", res)
	}
	if setup := rep.log(0); !strings.Contains(setup, "caches: not saved: the run did not succeed") {
		t.Fatalf("setup log:\n%s", setup)
	}
	if n := len(store.Entries()); n != 0 {
		t.Fatalf("a failed run saved %d entries", n)
	}
}

// A step that changes a restored file in place must not change the entry
// (a restore by hard link would).
func TestCaches_Shell_StepWritingRestoredFileLeavesEntryIntact(t *testing.T) {
	store := openTestStore(t, 0)
	ctx := context.Background()
	rep, res := execute(t, ctx, cacheJob(t, store, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	wf := cacheWorkflow + "  - run: echo scribbled > vendor/lib.txt\n"
	rep, res = execute(t, ctx, cacheJob(t, store, "alice/app", "v1", wf))
	mustSucceed(t, rep, res)
	rep, res = execute(t, ctx, cacheJob(t, store, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	if got := rep.log(1); !strings.Contains(got, "vendor: v1") {
		t.Fatalf("a step's write reached the cache entry:\n%s", got)
	}
}

func TestCaches_ConcurrentRunsSavingOneKeyLeaveOneWholeEntry(t *testing.T) {
	store := openTestStore(t, 0)
	// Each run writes 200 files of its own; an entry mixing two runs' files
	// would be torn.
	wf := `
on: {push: {}}
caches:
  - key: same-key
    paths: [out]
steps:
  - run: |
      mkdir out
      for i in $(seq 1 200); do echo "$KNOTLESS_RUN" > out/f$i; done
`
	var wg sync.WaitGroup
	results := make([]Result, 3)
	logs := make([]string, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job := cacheJob(t, store, "alice/app", "x", wf)
			job.Run = int64(100 + i)
			rep := newMemReporter()
			results[i] = Execute(context.Background(), job, testShell(t), rep)
			logs[i] = rep.log(0)
		}()
	}
	wg.Wait()
	saved := 0
	for i, r := range results {
		if r.State != api.StateSucceeded {
			t.Fatalf("run %d: %+v\n%s", i, r, logs[i])
		}
		if strings.Contains(logs[i], "same-key: saved ") {
			saved++
		} else if !strings.Contains(logs[i], "another run saved this key meanwhile") {
			t.Fatalf("run %d neither saved nor said why:\n%s", i, logs[i])
		}
	}
	if saved != 1 {
		t.Fatalf("%d runs saved the key, want 1", saved)
	}
	e, m, release := store.Lookup("alice/app", []string{"out"}, "same-key", nil)
	defer release()
	if m != cache.Hit {
		t.Fatal("no entry")
	}
	des, err := os.ReadDir(e.PathDir(0))
	if err != nil || len(des) != 200 {
		t.Fatalf("entry has %d files (%v), want 200", len(des), err)
	}
	first, _ := os.ReadFile(filepath.Join(e.PathDir(0), "f1"))
	for _, de := range des {
		if b, _ := os.ReadFile(filepath.Join(e.PathDir(0), de.Name())); string(b) != string(first) {
			t.Fatalf("%s holds %q, f1 %q: a torn entry", de.Name(), b, first)
		}
	}
}

func TestCaches_EvictionPastCacheSizeIsLogged(t *testing.T) {
	store := openTestStore(t, 150_000)
	wf := `
on: {push: {}}
caches:
  - key: blob-{{ hashFiles "deps.lock" }}
    paths: [blob]
steps:
  - run: mkdir blob && head -c 100000 /dev/zero > blob/data
`
	ctx := context.Background()
	rep, res := execute(t, ctx, cacheJob(t, store, "alice/app", "one", wf))
	mustSucceed(t, rep, res)
	rep, res = execute(t, ctx, cacheJob(t, store, "alice/app", "two", wf))
	mustSucceed(t, rep, res)
	if setup := rep.log(0); !strings.Contains(setup, "caches: evicted blob-") || !strings.Contains(setup, "--cache-size") {
		t.Fatalf("want an eviction line:\n%s", setup)
	}
	if n := len(store.Entries()); n != 1 || store.Size() > store.Limit() {
		t.Fatalf("%d entries of %d bytes, limit %d", n, store.Size(), store.Limit())
	}
}

func TestCaches_ExecWithoutStoreSaysSo(t *testing.T) {
	rep, res := execute(t, context.Background(), cacheJob(t, nil, "alice/app", "v1", cacheWorkflow))
	mustSucceed(t, rep, res)
	if setup := rep.log(0); !strings.Contains(setup, "caches: not used: knotless-run exec keeps no cache store") {
		t.Fatalf("setup log:\n%s", setup)
	}
}

func TestCachePath_HomeWorkspaceAndEscapes(t *testing.T) {
	for p, want := range map[string]string{
		"vendor": "/ws/vendor", "a/../b": "/ws/b", "~": "/home/k", "~/.cache/go-build": "/home/k/.cache/go-build", ".": "/ws",
	} {
		if got, err := CachePath(p, "/ws", "/home/k"); err != nil || got != want {
			t.Errorf("CachePath(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"/etc", "../x", "~/../x", "~root/x", ""} {
		if got, err := CachePath(p, "/ws", "/home/k"); err == nil {
			t.Errorf("CachePath(%q) = %q, accepted", p, got)
		}
	}
}

// failingSave is a real shell session whose SaveCache writes part of what
// it was asked for and then fails, as a transfer cut short or refused by
// its checksum does.
type failingSave struct{ executor.Session }

func (f failingSave) Home(ctx context.Context) (string, error) {
	return f.Session.(executor.Cacher).Home(ctx)
}
func (f failingSave) RestoreCache(ctx context.Context, src, dst string) error {
	return f.Session.(executor.Cacher).RestoreCache(ctx, src, dst)
}
func (f failingSave) SaveCache(ctx context.Context, src, stage string) error {
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return err
	}
	_ = os.WriteFile(filepath.Join(stage, "half"), []byte("torn"), 0o600)
	return errors.New("copy out: the agent sent 100 bytes (sha256 aa..), 50 arrived (sha256 bb..)")
}

type failingSaveExecutor struct{ executor.Executor }

func (x failingSaveExecutor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	s, err := x.Executor.Prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return failingSave{s}, nil
}

func TestCaches_FailedTransferIsNeverStored(t *testing.T) {
	store := openTestStore(t, 0)
	rep := newMemReporter()
	res := Execute(context.Background(), cacheJob(t, store, "alice/app", "v1", cacheWorkflow), failingSaveExecutor{testShell(t)}, rep)
	mustSucceed(t, rep, res)
	if setup := rep.log(0); !strings.Contains(setup, "vendor: copy out") || !strings.Contains(setup, "the entry is not saved") {
		t.Fatalf("setup log:\n%s", setup)
	}
	if n := len(store.Entries()); n != 0 {
		t.Fatalf("a failed transfer was stored: %d entries", n)
	}
	if tmp, _ := os.ReadDir(filepath.Join(store.Dir(), "tmp")); len(tmp) != 0 {
		t.Fatalf("the aborted save is left in tmp/: %d entries", len(tmp))
	}
}

// End to end: a real server, a real runner process loop with the shell
// executor and its store under --work, two pushes.
func TestIntegration_CacheMissThenHitAcrossPushes(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(func(c *Config) { c.CacheSize = 1 << 20 })
	files := map[string]string{"deps.lock": "v1\n", ".knotless/workflows/ci.yml": strings.TrimPrefix(cacheWorkflow, "\n")}
	run := w.push(files)
	final := w.waitFinal(run.ID, 60*time.Second)
	setup := string(w.stepLog(run.ID, 0))
	if final.State != api.StateSucceeded || !strings.Contains(setup, ": miss;") || !strings.Contains(setup, ": saved ") {
		t.Fatalf("first run %+v:\n%s", final, setup)
	}
	files["other.txt"] = "a change that keeps deps.lock\n"
	run = w.push(files)
	final = w.waitFinal(run.ID, 60*time.Second)
	setup = string(w.stepLog(run.ID, 0))
	if final.State != api.StateSucceeded || !strings.Contains(setup, ": hit: restored 2 of 2 paths") {
		t.Fatalf("second run %+v:\n%s", final, setup)
	}
	if got := string(w.stepLog(run.ID, 1)); !strings.Contains(got, "vendor: v1") || !strings.Contains(got, "home: built from v1") {
		t.Fatalf("second run's step:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(w.work, "caches", "repos", cache.ID(w.repo))); err != nil {
		t.Fatalf("the store is not under --work: %v", err)
	}
	w.assertCleanedUp(run.ID)
}

// A checkout may hold a symbolic link (a repository can); a cache path
// below it must not lead the restore outside the checkout.
func TestCaches_Shell_LinkInCheckoutDoesNotLeadRestoreOutside(t *testing.T) {
	store := openTestStore(t, 0)
	wf := `
on: {push: {}}
caches:
  - key: k
    paths: [vendor/sub]
steps:
  - run: mkdir -p vendor/sub && echo cached > vendor/sub/file
`
	ctx := context.Background()
	rep, res := execute(t, ctx, cacheJob(t, store, "alice/app", "v1", wf))
	mustSucceed(t, rep, res)
	outside := t.TempDir()
	job := cacheJob(t, store, "alice/app", "v1", strings.Replace(wf, "mkdir -p vendor/sub && echo cached > vendor/sub/file", "echo no step writes", 1))
	if err := os.Symlink(outside, filepath.Join(job.Workspace, "vendor")); err != nil {
		t.Fatal(err)
	}
	rep, res = execute(t, ctx, job)
	mustSucceed(t, rep, res)
	if setup := rep.log(0); !strings.Contains(setup, "restoring vendor/sub failed") || !strings.Contains(setup, "symbolic link") {
		t.Fatalf("setup log:\n%s", setup)
	}
	if des, _ := os.ReadDir(outside); len(des) != 0 {
		t.Fatalf("the restore wrote outside the checkout: %v", des)
	}
}

// A save a killed runner left in the store's tmp/ is removed when the next
// runner starts on the work directory, before it claims anything.
func TestIntegration_RunnerStartSweepsTornCacheSave(t *testing.T) {
	w := newWorld(t, true)
	torn := filepath.Join(w.work, "caches", "tmp", "save-123", "0")
	if err := os.MkdirAll(torn, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(torn, "half"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.startRunner(nil)
	testwait.For(t, 10*time.Second, "the torn save swept", func() bool {
		_, err := os.Stat(filepath.Dir(torn))
		return os.IsNotExist(err)
	})
	if des, err := os.ReadDir(filepath.Join(w.work, "caches", "repos")); err != nil || len(des) != 0 {
		t.Fatalf("repos/ after the sweep: %v %v", des, err)
	}
}

// TestCaches_TakenOverRunSavesItsCaches: a run taken over after a runner
// restart once never saved its caches ("caches: not saved by this
// process: the run was taken over"). The first process leaves in the
// environment what its restore found; the successor, which does not
// restore, saves as the first would have. An environment that does not
// say is a line of the setup log and nothing saved; a run whose setup
// starts over restores anew.
func TestCaches_TakenOverRunSavesItsCaches(t *testing.T) {
	store := openTestStore(t, 0)
	ex := testShell(t)
	wf := "on: {push: {}}\ncaches:\n  - key: k\n    paths: [x]\nsteps:\n  - run: mkdir -p x && echo built > x/out\n"
	takeover := func(id string, record bool) (Result, string) {
		t.Helper()
		sess, err := ex.Prepare(context.Background(), executor.Spec{ID: id, Workspace: t.TempDir(), Log: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(sess.Workdir(), ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
		if record {
			// What the first process's restore left: a miss of key k.
			e := &execution{setup: openSetupLog(newMemReporter(), nil, 0, testLogger(t))}
			e.recordCaches(context.Background(), sess, cacheRestoreResult{{c: workflow.Cache{Key: "k", Paths: []string{"x"}}, index: 1, key: "k", match: cache.Miss}})
		}
		h := sess.Handle()
		job := cacheJob(t, store, "alice/app", "v1", wf)
		job.Workspace = sess.Workdir()
		job.Resume = &Resume{Session: &h, Recovered: sess, Started: time.Now(), By: "test",
			Steps: map[int]api.UpdateStepInput{0: {Run: 42, Step: 0, State: api.StepSucceeded}}}
		rep := newMemReporter()
		return Execute(context.Background(), job, ex, rep), rep.log(0)
	}
	res, setup := takeover("run-1", false)
	if res.State != api.StateSucceeded || !strings.Contains(setup, "caches: not saved by this process: the run was taken over, and its environment does not say") || len(store.Entries()) != 0 {
		t.Fatalf("without a record: %+v, %d entries\n%s", res, len(store.Entries()), setup)
	}
	res, setup = takeover("run-2", true)
	if res.State != api.StateSucceeded || !strings.Contains(setup, "caches: k: saved") || len(store.Entries()) != 1 {
		t.Fatalf("with the first process's record: %+v, %d entries\n%s", res, len(store.Entries()), setup)
	}
}

// The runner writes nothing of its own into a cache: a step that receives
// a secret and does not write it into a cached path leaves no byte of it
// in the store (entry.json holds the repository, key, paths and sizes).
func TestCaches_SecretOfTheRunNeverInTheStore(t *testing.T) {
	store := openTestStore(t, 0)
	const secret = "s3cr3t-V4LUE-for-caches"
	wf := `
on: {push: {}}
secrets: [TOKEN]
caches:
  - key: k-{{ hashFiles "deps.lock" }}
    paths: [vendor, ~/.cache/tool]
steps:
  - secrets: [TOKEN]
    run: |
      test -n "$TOKEN"
      mkdir -p vendor ~/.cache/tool
      echo built > vendor/out
      echo built > ~/.cache/tool/out
`
	job := cacheJob(t, store, "alice/app", "v1", wf)
	job.Secrets = map[string]string{"TOKEN": secret}
	rep, res := execute(t, context.Background(), job)
	mustSucceed(t, rep, res)
	if n := len(store.Entries()); n != 1 {
		t.Fatalf("%d entries", n)
	}
	err := filepath.WalkDir(store.Dir(), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), secret) {
			t.Errorf("%s holds the run's secret", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// With a root shell runner's --user, what a restore makes (the files and
// the directories above them it had to create) is the step user's: a step
// changes restored files and adds files beside them.
func TestCaches_Shell_StepUserOwnsWhatTheRestoreMade(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "needs a root runner")
	}
	u, err := shell.LookupStepUser("nobody", 0)
	if err != nil {
		testenv.Skipf(t, "no step user nobody: %v", err)
	}
	// Directories the step user can search, as a real --work is.
	base, err := os.MkdirTemp("", "knotless-cache-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	store, err := cache.Open(filepath.Join(base, "caches"), 0, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ex := shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true, Logger: testLogger(t)}, Dir: filepath.Join(base, "shell"), User: u})
	wf := `
on: {push: {}}
caches:
  - key: k
    paths: [vendor/deps, ~/.cache/tool]
steps:
  - run: |
      mkdir -p vendor/deps ~/.cache/tool
      if [ -f vendor/deps/lib.txt ]; then echo more >> vendor/deps/lib.txt; echo x > vendor/new.txt; echo y > ~/.cache/new.txt; echo "warm: $(id -un)"; fi
      echo v1 >> vendor/deps/lib.txt
      echo v1 >> ~/.cache/tool/obj
`
	for i := range 2 {
		ws := filepath.Join(base, "runs", fmt.Sprint(i), "workspace")
		if err := os.MkdirAll(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		job := testJob(t, wf)
		job.Workspace, job.Caches, job.Run = ws, store, int64(50+i)
		rep := newMemReporter()
		res := Execute(context.Background(), job, ex, rep)
		mustSucceed(t, rep, res)
		if i == 1 && !strings.Contains(rep.log(1), "warm: nobody") {
			t.Fatalf("second run:\n%s\n%s", rep.log(0), rep.log(1))
		}
	}
}

// failingRestore is a real shell session whose RestoreCache fails.
type failingRestore struct{ executor.Session }

func (f failingRestore) Home(ctx context.Context) (string, error) {
	return f.Session.(executor.Cacher).Home(ctx)
}
func (f failingRestore) RestoreCache(ctx context.Context, src, dst string) error {
	return errors.New("copy in: refused")
}
func (f failingRestore) SaveCache(ctx context.Context, src, stage string) error {
	return f.Session.(executor.Cacher).SaveCache(ctx, src, stage)
}

type failingRestoreExecutor struct{ executor.Executor }

func (x failingRestoreExecutor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	s, err := x.Executor.Prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return failingRestore{s}, nil
}

// An exact hit whose restore failed said "hit" and then "not saved:
// another run saved this key meanwhile" (a new-user trial): the log says
// the hit was not whole and that the entry is kept.
func TestCaches_ExactHitThatFailedToRestoreSaysSoAndKeepsTheEntry(t *testing.T) {
	store := openTestStore(t, 0)
	rep := newMemReporter()
	mustSucceed(t, rep, Execute(context.Background(), cacheJob(t, store, "alice/app", "v1", cacheWorkflow), testShell(t), rep))
	rep = newMemReporter()
	mustSucceed(t, rep, Execute(context.Background(), cacheJob(t, store, "alice/app", "v1", cacheWorkflow), failingRestoreExecutor{testShell(t)}, rep))
	setup := rep.log(0)
	if !strings.Contains(setup, "(not all restored: treated as a miss)") || !strings.Contains(setup, "the entry with this key is kept") ||
		strings.Contains(setup, "another run saved this key meanwhile") {
		t.Fatalf("setup log:\n%s", setup)
	}
	if n := len(store.Entries()); n != 1 {
		t.Fatalf("entries: %d, want the one", n)
	}
}
