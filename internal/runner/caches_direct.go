package runner

import (
	"context"
	"errors"
	"strconv"
	"time"

	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/workflow"
)

// directExpiryMargin is added to the transfer's bound for how long a
// presigned URL handed to a job environment reads its entry.
const directExpiryMargin = 5 * time.Minute

// restoreDirect restores cache c (key rendered in st.key) by having the
// job environment download the bucket's entry itself from a presigned
// URL (cache.Store.Locate, executor.CacheFetcher), when the store allows
// it (--cache-store-direct), the environment can, and this runner holds
// no copy of the exact key. It reports whether the cache is restored (a
// setup-log line said so); false leaves it to the runner's own route
// (Find, then RestoreCache), with a line saying why when the environment
// tried and failed.
func (e *execution) restoreDirect(ctx context.Context, sess executor.Session, store *cache.Store, st *cacheState, c workflow.Cache, home string) bool {
	f, ok := sess.(executor.CacheFetcher)
	if !ok || !store.Direct() || store.Has(e.job.Repo, c.Paths, st.key) {
		return false
	}
	start := time.Now()
	rem, err := store.Locate(ctx, e.job.Repo, c.Paths, st.key, c.RestoreKeys, store.TransferTimeout()+directExpiryMargin)
	if err != nil || rem.Match == cache.Miss {
		return false // Find asks again, and says what the store answered
	}
	members := make(map[string]string, len(c.Paths))
	for j, p := range c.Paths {
		dst, err := CachePath(p, sess.Workdir(), home)
		if err != nil {
			return false
		}
		members[strconv.Itoa(j)] = dst
	}
	fctx, cancel := context.WithTimeout(ctx, store.TransferTimeout())
	defer cancel()
	got, err := f.FetchCache(fctx, executor.FetchSource{URL: rem.URL, Bytes: rem.Bytes, SHA256: rem.SHA256, Compression: rem.Compression}, members)
	if errors.Is(err, executor.ErrFetchUnsupported) {
		return false
	}
	if err != nil {
		e.setup.printf("caches: %s: the job could not download the entry from the cache store itself (%v): the runner brings it\n", st.key, err)
		return false
	}
	st.match = rem.Match
	how := "hit"
	if rem.Match == cache.PartialHit {
		how = "partial hit by restore key, entry " + rem.Key
	}
	e.setup.printf("caches: %s: %s (downloaded %s by the job from the cache store): restored %d of %d paths, in %s\n", st.key, how,
		byteCount(rem.Bytes), len(got), len(c.Paths), time.Since(start).Round(time.Millisecond))
	e.log.Info("cache restored", "key", st.key, "match", rem.Match.String(), "entry", rem.Key, "bytes", rem.Bytes, "by", "job")
	return true
}
