package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/workflow"
)

// CacheSaveTimeout bounds saving one run's caches, whatever is left of the
// run's own timeout.
const CacheSaveTimeout = 15 * time.Minute

// cacheState is what restoring one `caches:` entry found, for the save.
type cacheState struct {
	c     workflow.Cache
	index int    // 1-based, for the log
	key   string // rendered; "" when the key could not be rendered
	match cache.Match
	// broken says a path of the matched entry could not be restored.
	broken bool
}

// cacheRestoreResult is what restoreCaches found for each cache.
type cacheRestoreResult []cacheState

// cacher is sess's cache seam, or the generic one over CopyIn and CopyOut.
func cacher(sess executor.Session) executor.Cacher {
	if c, ok := sess.(executor.Cacher); ok {
		return c
	}
	return genericCacher{sess}
}

type genericCacher struct{ s executor.Session }

func (g genericCacher) Home(context.Context) (string, error) {
	return "", errors.New("this executor does not say where HOME is")
}
func (g genericCacher) RestoreCache(ctx context.Context, src, dst string) error {
	return g.s.CopyIn(ctx, src, dst)
}
func (g genericCacher) SaveCache(ctx context.Context, src, stage string) error {
	return g.s.CopyOut(ctx, src, stage)
}

// CachePath resolves p, a path of a `caches:` entry, to an absolute path
// as the steps see it: "~" and "~/REL" are below home, anything else is
// relative to workdir (the checkout). It refuses absolute paths, "~user"
// and paths that leave their root (workflow.Parse refuses them already;
// this holds for every caller).
func CachePath(p, workdir, home string) (string, error) {
	if err := workflow.CheckCachePath(p); err != nil {
		return "", err
	}
	root, rel := workdir, p
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home == "" {
			return "", fmt.Errorf("%q is under HOME, which this executor does not tell", p)
		}
		root, rel = home, strings.TrimPrefix(strings.TrimPrefix(p, "~"), "/")
	}
	return path.Join(root, path.Clean("/"+rel)), nil
}

// restoreCaches renders each cache's key against the checkout and restores
// the exact entry, else the newest one matching a restore key, before the
// first step; every cache is one line of the setup log (hit, partial hit,
// miss). Failures are lines too, never a failure of the run: a run without
// its cache is only slower.
func (e *execution) restoreCaches(ctx context.Context, sess executor.Session) cacheRestoreResult {
	wf := e.wf
	if len(wf.Caches) == 0 {
		return nil
	}
	sl := e.setup
	store := e.job.Caches
	if store == nil {
		sl.printf("caches: not used: knotless-run exec keeps no cache store (knotless-run run does, under --work)\n")
		return nil
	}
	store.SweepSoon()
	cs := cacher(sess)
	home, herr := cs.Home(ctx)
	out := make(cacheRestoreResult, 0, len(wf.Caches))
	for i, c := range wf.Caches {
		st := cacheState{c: c, index: i + 1}
		key, err := e.renderKey(c.Key)
		if err != nil {
			sl.printf("caches: cache %d: not used: %v\n", i+1, err)
			out = append(out, st)
			continue
		}
		st.key = key
		if herr == nil && e.restoreDirect(ctx, sess, store, &st, c, home) {
			out = append(out, st)
			continue
		}
		start := time.Now()
		found := store.Find(ctx, e.job.Repo, c.Paths, key, c.RestoreKeys)
		ent, m, release := found.Entry, found.Match, found.Release
		st.match = m
		if m == cache.Miss {
			sl.printf("caches: %s: miss%s; saved after the run if it succeeds\n", key, faultNote(found.Fault))
			out = append(out, st)
			continue
		}
		restored, failed := 0, false
		for j, p := range ent.Paths {
			if !contains(c.Paths, p) {
				continue
			}
			dst, err := CachePath(p, sess.Workdir(), home)
			if err != nil && herr != nil {
				err = fmt.Errorf("%w: %v", err, herr)
			}
			if err == nil {
				err = cs.RestoreCache(ctx, ent.PathDir(j), dst)
			}
			if errors.Is(err, fs.ErrNotExist) {
				continue // the path was absent when the entry was saved
			}
			if err != nil {
				sl.printf("caches: %s: restoring %s failed: %v\n", key, p, err)
				failed = true
				continue
			}
			restored++
		}
		release()
		how := "hit"
		if m == cache.PartialHit {
			how = fmt.Sprintf("partial hit by restore key, entry %s", ent.Key)
		}
		if found.Downloaded {
			how += fmt.Sprintf(" (downloaded %s from the cache store)", byteCount(found.Fetched))
		}
		how += faultNote(found.Fault)
		if failed {
			// A broken restore must not be taken for a hit: save anew.
			st.match, st.broken = cache.Miss, true
			how += " (not all restored: treated as a miss)"
		}
		sl.printf("caches: %s: %s: restored %d of %d paths, %s in %d files and directories, in %s\n", key, how, restored, len(c.Paths),
			byteCount(ent.Bytes), ent.Files, time.Since(start).Round(time.Millisecond))
		e.log.Info("cache restored", "key", key, "match", m.String(), "entry", ent.Key, "bytes", ent.Bytes)
		out = append(out, st)
	}
	return out
}

// renderKey expands a key's {{ hashFiles ... }} against the checkout on
// this host and checks the result.
func (e *execution) renderKey(tmpl string) (string, error) {
	key, err := workflow.RenderCacheKey(tmpl, func(patterns ...string) (string, error) {
		sum, n, err := cache.HashFiles(e.job.Workspace, patterns...)
		if err == nil && n == 0 {
			e.setup.printf("caches: hashFiles %s matched no file of the checkout: it gives \"\"\n", strings.Join(quoteAll(patterns), " "))
		}
		return sum, err
	})
	if err != nil {
		return "", err
	}
	if err := cache.CheckKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// saveCaches saves each cache whose key was not an exact hit, after a run
// that succeeded (and after its outputs were collected, so that an
// executor may move the directories instead of copying them).
func (e *execution) saveCaches(ctx context.Context, sess executor.Session, res Result, restored cacheRestoreResult) {
	if len(restored) == 0 {
		return
	}
	sl := e.setup
	if res.State != api.StateSucceeded {
		sl.printf("caches: not saved: the run did not succeed\n")
		return
	}
	if errors.Is(context.Cause(ctx), ErrRunnerStopped) {
		sl.printf("caches: not saved: the runner is stopping\n")
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CacheSaveTimeout)
	defer cancel()
	defer e.onHandover(func() { cancel() })()
	cs := cacher(sess)
	home, herr := cs.Home(cctx)
	store := e.job.Caches
	for _, st := range restored {
		switch {
		case st.key == "":
			continue
		case st.match == cache.Hit:
			sl.printf("caches: %s: not saved: the key was an exact hit\n", st.key)
			continue
		case st.broken && store.Has(e.job.Repo, st.c.Paths, st.key):
			sl.printf("caches: %s: not saved: the entry with this key is kept (a path of it could not be restored: see above)\n", st.key)
			continue
		case store.Has(e.job.Repo, st.c.Paths, st.key):
			sl.printf("caches: %s: not saved: another run saved this key meanwhile\n", st.key)
			continue
		}
		start := time.Now()
		stage, err := store.Begin(e.job.Repo, st.key, st.c.Paths)
		if err != nil {
			sl.printf("caches: %s: not saved: %v\n", st.key, err)
			continue
		}
		saved := 0
		for j, p := range st.c.Paths {
			src, err := CachePath(p, sess.Workdir(), home)
			if err != nil && herr != nil {
				err = fmt.Errorf("%w: %v", err, herr)
			}
			if err == nil {
				err = cs.SaveCache(cctx, src, stage.PathDir(j))
			}
			switch {
			case err == nil:
				saved++
			case errors.Is(err, fs.ErrNotExist):
				sl.printf("caches: %s: %s does not exist: not saved\n", st.key, p)
			default:
				sl.printf("caches: %s: %s: %v: the entry is not saved (a cache is saved with all its paths or not at all)\n", st.key, p, err)
				e.noSpace(err, "caches: "+st.key+" not saved")
				saved = -1
			}
			if saved < 0 {
				break
			}
		}
		if saved <= 0 {
			stage.Abort()
			if saved == 0 {
				sl.printf("caches: %s: not saved: none of its paths exists\n", st.key)
			}
			continue
		}
		ent, evicted, err := stage.Commit()
		if errors.Is(err, cache.ErrExists) {
			sl.printf("caches: %s: not saved: another run saved this key meanwhile\n", st.key)
			continue
		}
		if err != nil {
			sl.printf("caches: %s: not saved: %v\n", st.key, err)
			continue
		}
		shared := e.shareCache(cctx, store, ent)
		sl.printf("caches: %s: saved %s in %d files and directories%s, in %s\n", st.key, byteCount(ent.Bytes), ent.Files, shared, time.Since(start).Round(time.Millisecond))
		for _, ev := range evicted {
			sl.printf("caches: evicted %s (%s, last used %s) to stay within --cache-size %s\n", ev.Key, byteCount(ev.Bytes),
				ev.Used.UTC().Format(time.RFC3339), byteCount(store.Limit()))
		}
		e.log.Info("cache saved", "key", st.key, "bytes", ent.Bytes, "evicted", len(evicted))
	}
}

// faultNote is a cache store's fault as the end of a setup log line ("" for
// none): the run went on with this runner's disk.
func faultNote(fault error) string {
	if fault == nil {
		return ""
	}
	if errors.Is(fault, cache.ErrDamaged) {
		return fmt.Sprintf(" (the cache store's entry was damaged: %v; went on with this runner's disk)", fault)
	}
	return fmt.Sprintf(" (the cache store could not be used: %v; went on with this runner's disk)", fault)
}

// shareCache uploads a saved entry to the store's bucket, if it has one,
// and says how as the middle of the "saved" line: a store that fails
// leaves the entry on this runner's disk.
func (e *execution) shareCache(ctx context.Context, store *cache.Store, ent *cache.Entry) string {
	if store.Bucket() == nil {
		return ""
	}
	start := time.Now()
	n, err := store.Upload(ctx, ent)
	switch {
	case errors.Is(err, cache.ErrShared):
		return ", on this runner's disk (not uploaded: another runner saved this key meanwhile)"
	case err != nil:
		e.log.Warn("cache not uploaded", "key", ent.Key, "err", err)
		return fmt.Sprintf(", on this runner's disk only (not uploaded: %v)", err)
	}
	return fmt.Sprintf(", uploaded to the cache store as %s (zstd) in %s", byteCount(n), time.Since(start).Round(time.Millisecond))
}

// cacheUsage is what the run's repository holds in the runner's cache
// store, for api.CompleteInput.Caches: nil for a run without `caches:`, or
// when the store could not tell (the runner's log says why). Bounded by
// cache.UsageTimeout.
func (e *execution) cacheUsage(ctx context.Context) *api.CacheUsage {
	store := e.job.Caches
	if e.wf == nil || len(e.wf.Caches) == 0 || store == nil {
		return nil
	}
	n, size, err := store.Usage(context.WithoutCancel(ctx), e.job.Repo)
	if err != nil {
		e.log.Warn("the repository's use of the cache store is not reported", "err", err)
		return nil
	}
	name := fmt.Sprintf("runner %s: disk", e.job.RunnerName)
	if b := store.Bucket(); b != nil {
		name = "s3: " + b.String()
	}
	return &api.CacheUsage{Store: name, Entries: n, Bytes: size}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// cacheRecordPath is where a run's environment keeps what its caches'
// restore found (relative to the checkout, inside .git where no step's
// file is), so that a process that takes the run over, also one whose
// work directory did not survive, saves the caches as the first would
// have.
const cacheRecordPath = ".git/knotless-caches.json"

// cacheRecord is one cache's restore as cacheRecordPath keeps it.
type cacheRecord struct {
	Index  int    `json:"index"`
	Key    string `json:"key"`
	Match  int    `json:"match"` // cache.Match
	Broken bool   `json:"broken,omitempty"`
}

// recordCaches writes what the restore found into the environment. A
// failure is a line of the setup log: only a successor's save needs it.
func (e *execution) recordCaches(ctx context.Context, sess executor.Session, restored cacheRestoreResult) {
	if len(restored) == 0 {
		return
	}
	recs := make([]cacheRecord, 0, len(restored))
	for _, st := range restored {
		recs = append(recs, cacheRecord{Index: st.index, Key: st.key, Match: int(st.match), Broken: st.broken})
	}
	err := func() error {
		b, err := json.Marshal(recs)
		if err != nil {
			return err
		}
		f, err := os.CreateTemp("", "knotless-caches-*.json")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		if _, err := f.Write(b); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return sess.CopyIn(ctx, f.Name(), cacheRecordPath)
	}()
	if err != nil {
		e.setup.printf("caches: what the restore found could not be kept in the environment (%v): a runner that takes this run over will not save them\n", err)
	}
}

// recoveredCaches reads what the first process's restore found, for a
// run taken over in its environment; nil (and a line of the setup log)
// when the environment does not say.
func (e *execution) recoveredCaches(ctx context.Context, sess executor.Session) cacheRestoreResult {
	if len(e.wf.Caches) == 0 {
		return nil
	}
	if e.job.Caches == nil {
		return nil
	}
	dir, err := os.MkdirTemp("", "knotless-caches-")
	if err == nil {
		defer os.RemoveAll(dir)
		err = sess.CopyOut(ctx, cacheRecordPath, filepath.Join(dir, "r.json"))
	}
	var recs []cacheRecord
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(filepath.Join(dir, "r.json")); err == nil {
			err = json.Unmarshal(b, &recs)
		}
	}
	if err != nil {
		e.setup.printf("caches: not saved by this process: the run was taken over, and its environment does not say what the restore found (%v)\n", err)
		return nil
	}
	out := make(cacheRestoreResult, 0, len(recs))
	for _, r := range recs {
		if r.Index < 1 || r.Index > len(e.wf.Caches) {
			continue
		}
		out = append(out, cacheState{c: e.wf.Caches[r.Index-1], index: r.Index, key: r.Key, match: cache.Match(r.Match), broken: r.Broken})
	}
	e.setup.printf("caches: the run was taken over; its caches are saved after it as the first process's restore found them (%d)\n", len(out))
	return out
}
