package cache

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"knotless.dev/knotless/internal/objstore"
)

// Bounds of the bucket's calls (Options' zero values).
const (
	// DefaultLookupTimeout bounds finding one cache in the bucket: the
	// exact key's stat and each restore key's listing, together.
	DefaultLookupTimeout = 20 * time.Second
	// DefaultIdleTimeout abandons a download or upload that moved no
	// byte for this long (a stalled store).
	DefaultIdleTimeout = 30 * time.Second
	// DefaultTransferTimeout bounds one download or upload, however it
	// progresses: at 10 MB/s, 6 GB.
	DefaultTransferTimeout = 10 * time.Minute
)

// Options are a store's settings beyond its directory and bound.
type Options struct {
	// Bucket shares the entries with every runner that names it
	// (--cache-store): the local store becomes a read-through copy of
	// it. nil keeps the entries on this disk only.
	Bucket *objstore.Bucket
	// UnusedFor removes entries not used for this long
	// (--cache-unused-days); 0 keeps them until evicted.
	UnusedFor time.Duration
	// RepoLimit bounds one repository's entries in bytes
	// (--cache-repo-size), least recently used removed first; 0: none.
	RepoLimit int64
	// Direct says the job environments may reach the bucket
	// (--cache-store-direct): the runner hands them a presigned URL of an
	// entry (Locate) to download themselves, and restores through its
	// own disk only where they cannot.
	Direct bool
	// LookupTimeout, IdleTimeout and TransferTimeout bound the bucket's
	// calls; 0 is DefaultLookupTimeout, DefaultIdleTimeout,
	// DefaultTransferTimeout.
	LookupTimeout, IdleTimeout, TransferTimeout time.Duration
}

// Configure sets o; call it once, after Open and before the store is
// used.
func (s *Store) Configure(o Options) {
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = DefaultLookupTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.TransferTimeout <= 0 {
		o.TransferTimeout = DefaultTransferTimeout
	}
	s.opts = o
}

// Direct reports Options.Direct, for a store with a bucket.
func (s *Store) Direct() bool { return s.opts.Direct && s.opts.Bucket != nil }

// TransferTimeout is the bound of one download or upload.
func (s *Store) TransferTimeout() time.Duration { return s.opts.TransferTimeout }

// Bucket is the shared bucket, nil when the store is this disk's alone.
func (s *Store) Bucket() *objstore.Bucket { return s.opts.Bucket }

// Found is what Find found. Release it exactly once.
type Found struct {
	// Entry is the local entry to restore from; nil on a Miss.
	Entry *Entry
	Match Match
	// Downloaded says the entry came from the bucket just now, Fetched
	// its archive's bytes.
	Downloaded bool
	Fetched    int64
	// Fault says why the bucket could not be used (one line: the
	// store's failure, or an entry that failed its checksum); Find went
	// on with this disk's entries alone.
	Fault error

	release func()
}

// Release unpins the entry (a no-op on a Miss).
func (f Found) Release() {
	if f.release != nil {
		f.release()
	}
}

// ErrDamaged is wrapped by a Fault when an entry's bytes in the bucket do
// not match its checksum; the object is removed, so the run's save
// replaces it.
var ErrDamaged = errors.New("its bytes do not match its SHA-256")

// Find is Lookup through the bucket: an exact entry on this disk first;
// else, with a bucket, the bucket's entry with exactly key, else the
// newest (the last whole upload) whose key starts with the first restore
// key that has one; an entry the disk lacks is downloaded, checked
// (SHA-256 of every byte) and committed to the disk first. A bucket that
// fails, within Options' bounds, is a Fault, and Find goes on with the
// disk alone, like a store without a bucket. Safe for concurrent use.
func (s *Store) Find(ctx context.Context, repo string, paths []string, key string, restoreKeys []string) Found {
	e, m, rel := s.Lookup(repo, paths, key, nil)
	if m == Hit {
		s.touchUsed(entryName(repo, paths, key))
		return Found{Entry: e, Match: Hit, release: rel}
	}
	rel()
	local := func(fault error) Found {
		e, m, rel := s.Lookup(repo, paths, key, restoreKeys)
		return Found{Entry: e, Match: m, Fault: fault, release: rel}
	}
	if s.opts.Bucket == nil {
		return local(nil)
	}
	name, ckey, match, err := s.pick(ctx, repo, paths, key, restoreKeys)
	if err != nil {
		return local(brief(err))
	}
	if match == Miss {
		return local(nil) // entries this disk saved but could not upload
	}
	s.touchUsed(name)
	if e, m, rel := s.Lookup(repo, paths, ckey, nil); m == Hit {
		return Found{Entry: e, Match: match, release: rel}
	}
	n, err := s.download(ctx, repo, paths, ckey, name)
	if err != nil {
		return local(err)
	}
	e, m, rel = s.Lookup(repo, paths, ckey, nil)
	if m != Hit {
		return local(fmt.Errorf("cache %q: downloaded, then evicted from this disk at once (see --cache-size)", ckey))
	}
	return Found{Entry: e, Match: match, Downloaded: true, Fetched: n, release: rel}
}

// candidate is an entry the bucket listed.
type candidate struct {
	name, key string
	whole     bool // key is whole in the name
	modified  time.Time
	created   time.Time // from its metadata, read for ties only
}

// pick finds the entry Find restores in the bucket: its name and key and
// how it matched (Miss: none), within LookupTimeout.
func (s *Store) pick(ctx context.Context, repo string, paths []string, key string, restoreKeys []string) (string, string, Match, error) {
	b := s.opts.Bucket
	ctx, cancel := context.WithTimeout(ctx, s.opts.LookupTimeout)
	defer cancel()
	exact := entryName(repo, paths, key)
	if _, err := b.Stat(ctx, exact); err == nil {
		return exact, key, Hit, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", Miss, err
	}
	base := pathsPrefix(repo, paths)
	for _, rk := range restoreKeys {
		prefix, _ := restorePrefix(repo, paths, rk)
		var cands []*candidate
		for o, err := range b.List(ctx, prefix) {
			if err != nil {
				return "", "", Miss, err
			}
			k, whole, ok := spelledKey(strings.TrimPrefix(o.Name, base))
			if ok {
				cands = append(cands, &candidate{name: o.Name, key: k, whole: whole, modified: o.Modified})
			}
		}
		cands, err := s.keyed(ctx, cands, rk)
		if err != nil {
			return "", "", Miss, err
		}
		if len(cands) == 0 {
			continue
		}
		c, err := s.newest(ctx, cands)
		if err != nil {
			return "", "", Miss, err
		}
		return c.name, c.key, PartialHit, nil
	}
	return "", "", Miss, nil
}

// keyed reads the whole key of candidates whose name holds only its
// first spelledKeyBytes (from the metadata), and keeps those starting
// with rk.
func (s *Store) keyed(ctx context.Context, cands []*candidate, rk string) ([]*candidate, error) {
	out := cands[:0]
	for _, c := range cands {
		if !c.whole {
			info, err := s.opts.Bucket.Stat(ctx, c.name)
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed meanwhile
			}
			if err != nil {
				return nil, err
			}
			k, err := base64.RawURLEncoding.DecodeString(info.Meta["key"])
			if err != nil || ID(string(k)) != c.name[strings.LastIndexByte(c.name, '~')+1:len(c.name)-len(entrySuffix)] {
				continue // not an entry this package wrote
			}
			c.key, c.created = string(k), parseCreated(info.Meta)
		}
		if strings.HasPrefix(c.key, rk) {
			out = append(out, c)
		}
	}
	return out, nil
}

// newest is the candidate whose upload completed last (the store's clock,
// the same for every runner); candidates the store's clock cannot tell
// apart (it counts in seconds or milliseconds) are ordered by their
// metadata's creation time (the saving runner's clock, in nanoseconds),
// then by key.
func (s *Store) newest(ctx context.Context, cands []*candidate) (*candidate, error) {
	sort.Slice(cands, func(i, j int) bool { return cands[i].modified.After(cands[j].modified) })
	tied := cands[:1]
	for _, c := range cands[1:] {
		if c.modified.Equal(cands[0].modified) {
			tied = append(tied, c)
		}
	}
	if len(tied) == 1 {
		return tied[0], nil
	}
	for _, c := range tied {
		if !c.created.IsZero() {
			continue
		}
		info, err := s.opts.Bucket.Stat(ctx, c.name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		c.created = parseCreated(info.Meta)
	}
	sort.Slice(tied, func(i, j int) bool {
		if !tied[i].created.Equal(tied[j].created) {
			return tied[i].created.After(tied[j].created)
		}
		return tied[i].key > tied[j].key
	})
	return tied[0], nil
}

func parseCreated(meta map[string]string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, meta["created"])
	return t
}

// touchUsed rewrites the entry's last-use marker in the bucket (the
// retention sweep reads its time), in the background within
// LookupTimeout: a restore never waits for it.
func (s *Store) touchUsed(entry string) {
	b := s.opts.Bucket
	if b == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.LookupTimeout)
		defer cancel()
		if err := b.Put(ctx, usedName(entry), strings.NewReader(""), 0, nil); err != nil {
			s.log.Debug("cache store: mark an entry used in the bucket", "err", err)
		}
	}()
}

// Wait waits for the bucket calls the store makes in the background
// (last-use markers, each bounded by LookupTimeout).
func (s *Store) Wait() { s.bg.Wait() }

// Remote is a bucket entry as Locate finds it: what an environment needs
// to download and check the archive itself (executor.FetchSource).
type Remote struct {
	// Key is the entry's key; Match how it matched (Hit or PartialHit).
	Key   string
	Match Match
	// URL reads the archive with a plain GET and no credentials until
	// it expires.
	URL string
	// Bytes and SHA256 (hex) are the archive's, as its saver wrote
	// them; Compression is "zstd" (see Upload for the format).
	Bytes       int64
	SHA256      string
	Compression string
}

// Locate finds in the bucket the entry Find would download (the exact key,
// else the newest restore-key match) without downloading it, marks it
// used, and presigns its archive for expiry (at most 7 days). A Miss is a
// zero Remote with Match Miss and no error. Bounded by LookupTimeout.
// Errors: no bucket, or the bucket's (one line).
func (s *Store) Locate(ctx context.Context, repo string, paths []string, key string, restoreKeys []string, expiry time.Duration) (Remote, error) {
	b := s.opts.Bucket
	if b == nil {
		return Remote{}, errors.New("the cache store has no bucket (--cache-store)")
	}
	name, ckey, match, err := s.pick(ctx, repo, paths, key, restoreKeys)
	if err != nil || match == Miss {
		return Remote{}, brief(err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.LookupTimeout)
	defer cancel()
	info, err := b.Stat(ctx, name)
	if err != nil {
		return Remote{}, brief(err)
	}
	if info.Meta["sha256"] == "" {
		return Remote{}, fmt.Errorf("cache %q in %s: the object has no sha256 in its metadata: not restored", ckey, b)
	}
	u, err := b.PresignGet(ctx, name, expiry)
	if err != nil {
		return Remote{}, brief(err)
	}
	s.touchUsed(name)
	return Remote{Key: ckey, Match: match, URL: u.String(), Bytes: info.Size, SHA256: info.Meta["sha256"], Compression: "zstd"}, nil
}
