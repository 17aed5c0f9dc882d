package cache

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/cleanup"
)

// DefaultSize is the store's bound when --cache-size is not given: 10 GiB,
// what GitHub Actions allows one repository.
const DefaultSize = 10 << 30

// MaxKeyLen is the longest key (or restore key) in bytes, as GitHub
// Actions allows.
const MaxKeyLen = 512

// Entry is one saved cache.
type Entry struct {
	// Repo is the repository (OWNER/NAME) the entry belongs to.
	Repo string `json:"repo"`
	// Key is the key it was saved under.
	Key string `json:"key"`
	// Paths are the workflow's paths, as written, by index; Dir/<index>
	// holds what was saved of each (missing when the path was absent).
	Paths []string `json:"paths"`
	// Bytes is the size of its regular files (apparent size), Files the
	// number of files, directories and links.
	Bytes int64 `json:"bytes"`
	Files int   `json:"files"`
	// Created is when it was saved.
	Created time.Time `json:"created"`

	// Dir is the entry's directory (not stored).
	Dir string `json:"-"`
	// Used is its last use (saved or restored), the mtime of entry.json.
	Used time.Time `json:"-"`
}

// PathDir is where the entry keeps what was saved of Paths[i].
func (e *Entry) PathDir(i int) string { return filepath.Join(e.Dir, fmt.Sprint(i)) }

// Match says how Lookup found an entry.
type Match int

const (
	// Miss: no entry (Lookup's *Entry is nil).
	Miss Match = iota
	// Hit: an entry with exactly the key.
	Hit
	// PartialHit: the newest entry whose key starts with a restore key.
	PartialHit
)

func (m Match) String() string {
	switch m {
	case Hit:
		return "hit"
	case PartialHit:
		return "partial hit"
	}
	return "miss"
}

// Store is a cache store on the runner's disk. Its methods may be called
// concurrently. One process uses one store directory at a time (the runner
// holds its work directory's lock).
type Store struct {
	dir   string
	limit int64
	log   *slog.Logger
	// now is the store's clock for Created and Used (time.Now); this
	// package's tests give one that ticks, to order saves and uses without
	// sleeping.
	now func() time.Time

	// opts are Configure's (the bucket, retention, the bucket's time
	// bounds); set before the store is used.
	opts Options
	// bg counts the bucket calls made in the background (last-use
	// markers); Wait waits for them.
	bg sync.WaitGroup

	// nextSweep is when SweepSoon may sweep again (under mu).
	nextSweep time.Time

	mu      sync.Mutex
	entries map[string]*Entry // by Dir
	pins    map[string]int    // entries being restored or uploaded: not evicted
}

// Open opens (creating) the store in dir, bounded to limit bytes (0 means
// DefaultSize), sweeps what an earlier process left in tmp/ (saves it was
// killed in, evictions it did not finish) and entries without a readable
// entry.json, reads the index, and evicts down to limit. log may be nil.
func Open(dir string, limit int64, log *slog.Logger) (*Store, error) {
	if limit <= 0 {
		limit = DefaultSize
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Store{dir: dir, limit: limit, log: log, now: time.Now, entries: map[string]*Entry{}, pins: map[string]int{}}
	for _, d := range []string{dir, s.tmp(), filepath.Join(dir, "repos")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open cache store %s: %w", dir, err)
		}
	}
	swept, err := s.sweepTmp()
	if err != nil {
		return nil, fmt.Errorf("open cache store %s: sweep tmp: %w", dir, err)
	}
	if swept > 0 {
		log.Info("cache store: removed unfinished saves and evictions of an earlier process", "count", swept)
	}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("open cache store %s: %w", dir, err)
	}
	s.mu.Lock()
	evicted := s.evictLocked(0, "")
	s.mu.Unlock()
	s.removeEvicted(evicted)
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Limit is the store's bound in bytes.
func (s *Store) Limit() int64 { return s.limit }

func (s *Store) tmp() string { return filepath.Join(s.dir, "tmp") }

func (s *Store) sweepTmp() (int, error) {
	des, err := os.ReadDir(s.tmp())
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, de := range des {
		if err := cleanup.RemoveAll(filepath.Join(s.tmp(), de.Name()), s.log); err != nil {
			errs = append(errs, err)
		}
	}
	return len(des), errors.Join(errs...)
}

func (s *Store) load() error {
	repos := filepath.Join(s.dir, "repos")
	rdes, err := os.ReadDir(repos)
	if err != nil {
		return err
	}
	for _, rde := range rdes {
		rdir := filepath.Join(repos, rde.Name())
		edes, err := os.ReadDir(rdir)
		if err != nil {
			return err
		}
		for _, ede := range edes {
			edir := filepath.Join(rdir, ede.Name())
			e, err := readEntry(edir)
			if err != nil {
				// Not ours, or damaged outside the runner: out of sight.
				s.log.Warn("cache store: removing an entry that cannot be read", "dir", edir, "err", err)
				if err := s.discard(edir); err != nil {
					return err
				}
				continue
			}
			s.entries[edir] = e
		}
	}
	return nil
}

func readEntry(dir string) (*Entry, error) {
	f := filepath.Join(dir, "entry.json")
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	fi, err := os.Stat(f)
	if err != nil {
		return nil, err
	}
	e.Dir, e.Used = dir, fi.ModTime()
	return &e, nil
}

// ID is the directory name for s: a SHA-256 prefix, 32 hex digits.
func ID(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}

// entryDir is where repo's entry for key with paths lives: the paths are
// part of its identity (as GitHub Actions' cache version), so a workflow
// that changes its paths never restores directories saved for others.
func (s *Store) entryDir(repo string, paths []string, key string) string {
	return filepath.Join(s.dir, "repos", ID(repo), ID(strings.Join(paths, "\x00")+"\x00\x00"+key))
}

func samePaths(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// CheckKey checks a rendered key or restore key: 1 to MaxKeyLen bytes, no
// comma (as GitHub Actions) and no control character.
func CheckKey(k string) error {
	switch {
	case k == "":
		return errors.New("the key is empty")
	case len(k) > MaxKeyLen:
		return fmt.Errorf("the key has %d bytes; at most %d are allowed", len(k), MaxKeyLen)
	case strings.ContainsRune(k, ','):
		return fmt.Errorf("key %q holds a comma, which is not allowed", k)
	case strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("key %q holds a control character", k)
	}
	return nil
}

// Lookup finds repo's entry for key saved with exactly paths, else the
// newest (by Created) entry of repo with the same paths whose key starts
// with the first of restoreKeys that has one (as GitHub Actions does). A
// found entry is pinned: it is not evicted until release is called
// (exactly once; release is non-nil also on a Miss).
func (s *Store) Lookup(repo string, paths []string, key string, restoreKeys []string) (e *Entry, m Match, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.entries[s.entryDir(repo, paths, key)]; x != nil && x.Repo == repo && x.Key == key && samePaths(x.Paths, paths) {
		e, m = x, Hit
	} else {
		for _, rk := range restoreKeys {
			for _, x := range s.entries {
				if x.Repo != repo || !strings.HasPrefix(x.Key, rk) || !samePaths(x.Paths, paths) {
					continue
				}
				if e == nil || x.Created.After(e.Created) || (x.Created.Equal(e.Created) && x.Key > e.Key) {
					e = x
				}
			}
			if e != nil {
				m = PartialHit
				break
			}
		}
	}
	if e == nil {
		return nil, Miss, func() {}
	}
	s.pins[e.Dir]++
	now := s.now()
	e.Used = now
	_ = os.Chtimes(filepath.Join(e.Dir, "entry.json"), now, now)
	cp := *e
	var once sync.Once
	return &cp, m, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pins[cp.Dir]--; s.pins[cp.Dir] <= 0 {
				delete(s.pins, cp.Dir)
			}
		})
	}
}

// Has reports whether repo has an entry with exactly key and paths.
func (s *Store) Has(repo string, paths []string, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.entries[s.entryDir(repo, paths, key)]
	return x != nil && x.Repo == repo && x.Key == key && samePaths(x.Paths, paths)
}

// Stage is an entry being saved: the caller fills Dir/<index> for each
// path, then Commits or Aborts.
type Stage struct {
	s     *Store
	Dir   string
	repo  string
	key   string
	paths []string
	done  bool
	// created, when set, is the entry's Created (an entry downloaded
	// from the bucket keeps the time it was first saved).
	created time.Time
}

// Begin starts saving repo's entry for key with paths (as the workflow
// writes them). The stage's directory is in the store's tmp/ (on the
// store's file system, so that an executor may rename into it).
func (s *Store) Begin(repo, key string, paths []string) (*Stage, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(s.tmp(), "save-")
	if err != nil {
		return nil, fmt.Errorf("cache store: stage a save: %w", err)
	}
	return &Stage{s: s, Dir: dir, repo: repo, key: key, paths: paths}, nil
}

// PathDir is where the caller puts what it saves of path index i (it does
// not exist yet).
func (st *Stage) PathDir(i int) string { return filepath.Join(st.Dir, fmt.Sprint(i)) }

// Abort discards the stage. Safe after Commit (then it does nothing).
func (st *Stage) Abort() {
	if st.done {
		return
	}
	st.done = true
	if err := cleanup.RemoveAll(st.Dir, st.s.log); err != nil {
		st.s.log.Warn("cache store: remove an aborted save", "dir", st.Dir, "err", err)
	}
}

// ErrTooBig is wrapped by Commit's error when the entry alone is larger than
// the store's bound.
var ErrTooBig = errors.New("larger than the cache store's bound (--cache-size)")

// ErrExists is wrapped by Commit's error when another save of the same key
// was committed first (the stage is discarded; the existing entry stays).
var ErrExists = errors.New("another run saved this key first")

// Commit makes the stage repo's entry for key in one rename, then evicts
// the least recently used entries (not pinned ones) until the store fits
// its bound. It returns the entry and the entries it evicted. The stage is
// discarded when it fails.
func (st *Stage) Commit() (*Entry, []*Entry, error) {
	if st.done {
		return nil, nil, errors.New("cache store: stage committed or aborted already")
	}
	s := st.s
	bytes, files, err := treeSize(st.Dir)
	if err != nil {
		st.Abort()
		return nil, nil, fmt.Errorf("cache store: measure the save: %w", err)
	}
	if bytes > s.limit {
		st.Abort()
		return nil, nil, fmt.Errorf("cache %q: %d bytes: %w (%d bytes)", st.key, bytes, ErrTooBig, s.limit)
	}
	now := s.now().UTC()
	created := now
	if !st.created.IsZero() {
		created = st.created.UTC()
	}
	e := &Entry{Repo: st.repo, Key: st.key, Paths: st.paths, Bytes: bytes, Files: files, Created: created}
	b, _ := json.MarshalIndent(e, "", "  ")
	if err := writeSynced(filepath.Join(st.Dir, "entry.json"), b); err != nil {
		st.Abort()
		return nil, nil, fmt.Errorf("cache store: write entry.json: %w", err)
	}
	final := s.entryDir(st.repo, st.paths, st.key)
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		st.Abort()
		return nil, nil, fmt.Errorf("cache store: %w", err)
	}
	s.mu.Lock()
	if s.entries[final] != nil {
		s.mu.Unlock()
		st.Abort()
		return nil, nil, fmt.Errorf("cache %q: %w", st.key, ErrExists)
	}
	if err := os.Rename(st.Dir, final); err != nil {
		s.mu.Unlock()
		st.Abort()
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return nil, nil, fmt.Errorf("cache %q: %w", st.key, ErrExists)
		}
		return nil, nil, fmt.Errorf("cache store: commit %q: %w", st.key, err)
	}
	st.done = true
	syncDir(filepath.Dir(final))
	e.Dir, e.Used = final, now
	_ = os.Chtimes(filepath.Join(final, "entry.json"), now, now) // Used is its mtime at the next Open
	s.entries[final] = e
	evicted := s.evictLocked(0, final)
	s.mu.Unlock()
	s.removeEvicted(evicted)
	cp := *e
	return &cp, evicted, nil
}

// Size is the sum of the entries' Bytes.
func (s *Store) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sizeLocked()
}

func (s *Store) sizeLocked() int64 {
	var n int64
	for _, e := range s.entries {
		n += e.Bytes
	}
	return n
}

// Entries returns a copy of the index, least recently used first.
func (s *Store) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Used.Before(out[j].Used) })
	return out
}

// evictLocked takes least recently used entries out of the index (and out
// of repos/, by a rename into tmp/) until the store holds at most
// limit-room bytes; keep and pinned entries stay. It returns them for
// removeEvicted.
func (s *Store) evictLocked(room int64, keep string) []*Entry {
	size := s.sizeLocked()
	if size+room <= s.limit {
		return nil
	}
	all := make([]*Entry, 0, len(s.entries))
	for _, e := range s.entries {
		all = append(all, e)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Used.Before(all[j].Used) })
	var out []*Entry
	for _, e := range all {
		if size+room <= s.limit {
			break
		}
		if e.Dir == keep || s.pins[e.Dir] > 0 {
			continue
		}
		trash := filepath.Join(s.tmp(), "evict-"+randHex())
		if err := os.Rename(e.Dir, trash); err != nil {
			s.log.Warn("cache store: evict", "key", e.Key, "err", err)
			continue
		}
		delete(s.entries, e.Dir)
		size -= e.Bytes
		cp := *e
		cp.Dir = trash
		out = append(out, &cp)
	}
	return out
}

func (s *Store) removeEvicted(es []*Entry) {
	for _, e := range es {
		s.log.Info("cache store: evicted least recently used entry", "repo", e.Repo, "key", e.Key, "bytes", e.Bytes)
		if err := cleanup.RemoveAll(e.Dir, s.log); err != nil {
			s.log.Warn("cache store: remove evicted entry", "dir", e.Dir, "err", err)
		}
	}
}

func (s *Store) discard(dir string) error {
	trash := filepath.Join(s.tmp(), "discard-"+randHex())
	if err := os.Rename(dir, trash); err != nil {
		return err
	}
	return cleanup.RemoveAll(trash, s.log)
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// treeSize walks dir: the apparent size of its regular files and the number
// of entries below it.
func treeSize(dir string) (int64, int, error) {
	var n int64
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		files++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, files, err
}

func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
