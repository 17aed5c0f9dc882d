package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"knotless.dev/knotless/internal/cleanup"
)

// Retention bounds (see Options.UnusedFor and Options.RepoLimit).
const (
	// DefaultUnusedDays is --cache-unused-days' default, as GitHub
	// Actions removes caches not accessed in 7 days.
	DefaultUnusedDays = 7
	// RetentionGrace: an entry used or saved this recently is never
	// removed by retention, whatever the bounds say (it may be being
	// restored or uploaded right now).
	RetentionGrace = time.Hour
	// SweepEvery is how often a runner sweeps (on each run's caches, at
	// most this often, plus a jitter of up to a tenth).
	SweepEvery = time.Hour
	// SweepBatch is the most bucket entries one sweep removes; the next
	// sweep goes on.
	SweepBatch = 1000
	// SweepTimeout bounds one sweep of the bucket (listing and removals).
	SweepTimeout = 5 * time.Minute
)

// Removed is an entry retention removed.
type Removed struct {
	// Repo is the repository's name on this disk, its ID in the bucket
	// (the bucket's names hold only IDs).
	Repo string
	// Key is the entry's key ("" in the bucket when it is longer than
	// the name spells).
	Key string
	// Bytes is its size: apparent on the disk, stored in the bucket.
	Bytes int64
	// Used is its last use.
	Used time.Time
	// Why: "unused" (past UnusedFor) or "repository size" (past
	// RepoLimit, least recently used first).
	Why string
	// Bucket says it was the bucket's entry, not this disk's.
	Bucket bool
}

// SweepSoon starts a sweep (Sweep) in the background unless one ran in
// the last SweepEvery; it never waits. Safe for concurrent use.
func (s *Store) SweepSoon() {
	if s.opts.UnusedFor <= 0 && s.opts.RepoLimit <= 0 {
		return
	}
	s.mu.Lock()
	now := s.now()
	if !s.nextSweep.IsZero() && now.Before(s.nextSweep) {
		s.mu.Unlock()
		return
	}
	s.nextSweep = now.Add(SweepEvery + rand.N(SweepEvery/10))
	s.mu.Unlock()
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), SweepTimeout)
		defer cancel()
		_, _ = s.Sweep(ctx)
	}()
}

// Sweep removes what retention lets go, on this disk and, with a bucket,
// in the bucket: entries unused for UnusedFor, then each repository's
// least recently used beyond RepoLimit; never one used or saved in the
// last RetentionGrace, never one pinned on this disk. Each removal is
// logged. In the bucket it removes at most SweepBatch entries (the next
// sweep goes on), any runner may sweep, and a sweep twice is a sweep once
// (a removed object's removal is no error). An entry removed while a
// runner restores it is a miss for that run, never a failure. Errors: the
// bucket's (what was removed before stays removed).
func (s *Store) Sweep(ctx context.Context) ([]Removed, error) {
	out := s.sweepLocal()
	if s.opts.Bucket == nil {
		return out, nil
	}
	rm, err := s.sweepBucket(ctx)
	return append(out, rm...), err
}

// retained is one entry as retention sees it.
type retained struct {
	repo, key string
	bytes     int64
	used      time.Time
	ref       string // the disk's Dir, or the bucket's entry name
	hasUsed   bool   // the bucket's entry has a last-use marker
}

// expire picks from es what retention removes at now: the unused, then
// per repository the least recently used past limit.
func (o Options) expire(es []*retained, now time.Time) map[*retained]string {
	out := map[*retained]string{}
	byRepo := map[string][]*retained{}
	for _, e := range es {
		if now.Sub(e.used) < RetentionGrace {
			byRepo[e.repo] = append(byRepo[e.repo], e)
			continue
		}
		if o.UnusedFor > 0 && now.Sub(e.used) > o.UnusedFor {
			out[e] = "unused"
			continue
		}
		byRepo[e.repo] = append(byRepo[e.repo], e)
	}
	if o.RepoLimit <= 0 {
		return out
	}
	for _, list := range byRepo {
		var size int64
		for _, e := range list {
			size += e.bytes
		}
		sort.Slice(list, func(i, j int) bool { return list[i].used.Before(list[j].used) })
		for _, e := range list {
			if size <= o.RepoLimit {
				break
			}
			if now.Sub(e.used) < RetentionGrace {
				continue
			}
			out[e] = "repository size"
			size -= e.bytes
		}
	}
	return out
}

func (s *Store) sweepLocal() []Removed {
	now := s.now()
	s.mu.Lock()
	var es []*retained
	for _, e := range s.entries {
		if s.pins[e.Dir] == 0 {
			es = append(es, &retained{repo: e.Repo, key: e.Key, bytes: e.Bytes, used: e.Used, ref: e.Dir})
		}
	}
	var out []Removed
	var trash []string
	for r, why := range s.opts.expire(es, now) {
		e := s.entries[r.ref]
		t := filepath.Join(s.tmp(), "retire-"+randHex())
		if err := os.Rename(r.ref, t); err != nil {
			s.log.Warn("cache store: remove an entry by retention", "key", e.Key, "err", err)
			continue
		}
		delete(s.entries, r.ref)
		trash = append(trash, t)
		out = append(out, Removed{Repo: e.Repo, Key: e.Key, Bytes: e.Bytes, Used: e.Used, Why: why})
	}
	s.mu.Unlock()
	for _, r := range out {
		s.log.Info("cache store: removed an entry by retention", "repo", r.Repo, "key", r.Key, "bytes", r.Bytes,
			"last_used", r.Used.UTC().Format(time.RFC3339), "why", r.Why)
	}
	for _, t := range trash {
		if err := cleanup.RemoveAll(t, s.log); err != nil {
			s.log.Warn("cache store: remove a retired entry", "dir", t, "err", err)
		}
	}
	return out
}

// sweepBucket lists the bucket's entries (and last-use markers) and
// removes what retention lets go, SweepBatch at most; markers left
// without their entry go too.
func (s *Store) sweepBucket(ctx context.Context) ([]Removed, error) {
	b := s.opts.Bucket
	entries := map[string]*retained{}
	markers := map[string]time.Time{}
	for o, err := range b.List(ctx, namesVersion) {
		if err != nil {
			return nil, fmt.Errorf("cache retention: %w", brief(err))
		}
		parts := strings.SplitN(o.Name, "/", 4)
		if len(parts) < 4 {
			continue
		}
		switch {
		case strings.HasSuffix(o.Name, entrySuffix):
			k, _, ok := spelledKey(parts[3])
			if !ok {
				continue
			}
			e := entries[o.Name]
			if e == nil {
				e = &retained{ref: o.Name}
				entries[o.Name] = e
			}
			e.repo, e.key, e.bytes = parts[1], k, o.Size
			if o.Modified.After(e.used) {
				e.used = o.Modified
			}
		case strings.HasSuffix(o.Name, usedSuffix):
			markers[strings.TrimSuffix(o.Name, usedSuffix)+entrySuffix] = o.Modified
		}
	}
	es := make([]*retained, 0, len(entries))
	for name, e := range entries {
		if m, ok := markers[name]; ok {
			e.hasUsed = true
			if m.After(e.used) {
				e.used = m
			}
		}
		es = append(es, e)
	}
	now := s.now()
	var out []Removed
	var errs []error
	for e, why := range s.opts.expire(es, now) {
		if len(out) >= SweepBatch {
			break
		}
		if err := b.Remove(ctx, e.ref); err != nil {
			errs = append(errs, brief(err))
			continue
		}
		if e.hasUsed {
			_ = b.Remove(ctx, usedName(e.ref))
		}
		r := Removed{Repo: e.repo, Key: e.key, Bytes: e.bytes, Used: e.used, Why: why, Bucket: true}
		if len(e.key) >= spelledKeyBytes {
			r.Key = ""
		}
		out = append(out, r)
		s.log.Info("cache store: removed a bucket entry by retention", "bucket", b.String(), "repo_id", e.repo, "key", r.Key,
			"bytes", e.bytes, "last_used", e.used.UTC().Format(time.RFC3339), "why", why)
	}
	for name, at := range markers {
		if entries[name] == nil && now.Sub(at) > RetentionGrace {
			_ = b.Remove(ctx, usedName(name)) // its entry is gone
		}
	}
	return out, errors.Join(errs...)
}

// UsageTimeout bounds Usage's listing of the bucket (it runs as each run
// is reported).
const UsageTimeout = 5 * time.Second

// Usage is what repo's entries take: in the bucket when the store has one
// (stored bytes, compressed), else on this disk (apparent bytes). The
// bucket's listing is bounded by UsageTimeout. Errors: the bucket's.
func (s *Store) Usage(ctx context.Context, repo string) (entries int, bytes int64, err error) {
	if s.opts.Bucket == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range s.entries {
			if e.Repo == repo {
				entries++
				bytes += e.Bytes
			}
		}
		return entries, bytes, nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(s.opts.LookupTimeout, UsageTimeout))
	defer cancel()
	for o, err := range s.opts.Bucket.List(ctx, repoPrefix(repo)) {
		if err != nil {
			return 0, 0, brief(err)
		}
		if strings.HasSuffix(o.Name, entrySuffix) {
			entries++
			bytes += o.Size
		}
	}
	return entries, bytes, nil
}
