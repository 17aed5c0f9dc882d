package cache

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/objstore/s3test"
)

// randomText is n bytes of hex digits of random bytes: it compresses to
// about half.
func randomText(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// sharedStore opens a store in a new directory sharing the bucket at
// prefix of s, with short bounds.
func sharedStore(t *testing.T, s *s3test.Server, prefix string) *Store {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "caches"), 0)
	st.Configure(Options{Bucket: s.Open(t, prefix), LookupTimeout: 5 * time.Second, IdleTimeout: 2 * time.Second, TransferTimeout: 20 * time.Second})
	t.Cleanup(st.Wait)
	return st
}

// saveShared saves files as repo's key in st and uploads it.
func saveShared(t *testing.T, st *Store, repo, key string, files map[string]string) error {
	t.Helper()
	e, _, err := save(t, st, repo, key, files)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Upload(context.Background(), e)
	return err
}

// readFound is what a Found's entry holds in path 0: file → content.
func readFound(t *testing.T, f Found) map[string]string {
	t.Helper()
	if f.Entry == nil {
		return nil
	}
	out := map[string]string{}
	root := f.Entry.PathDir(0)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

func TestShared_ASecondRunnerWithAnEmptyDiskHitsWhatTheFirstSaved(t *testing.T) {
	s := s3test.Start(t)
	a, b := sharedStore(t, s, "caches"), sharedStore(t, s, "caches")
	if err := saveShared(t, a, "alice/app", "deps-1", map[string]string{"lib/x": "one", "y": "two"}); err != nil {
		t.Fatal(err)
	}
	f := b.Find(context.Background(), "alice/app", dirPaths, "deps-1", nil)
	defer f.Release()
	if f.Match != Hit || !f.Downloaded || f.Fault != nil {
		t.Fatalf("second store: %+v, want a downloaded hit", f)
	}
	if got := readFound(t, f); got["lib/x"] != "one" || got["y"] != "two" || len(got) != 2 {
		t.Fatalf("restored %v", got)
	}
	if !b.Has("alice/app", dirPaths, "deps-1") {
		t.Fatal("the download was not kept on the second disk")
	}
	// The third lookup is served from its disk.
	f2 := b.Find(context.Background(), "alice/app", dirPaths, "deps-1", nil)
	defer f2.Release()
	if f2.Match != Hit || f2.Downloaded {
		t.Fatalf("third lookup: %+v, want a hit from the disk", f2)
	}
}

// The bucket lists by name; a partial hit must take the newest entry,
// neither the first nor the last listed (deps-b, saved last, lists
// between deps-a and deps-c).
func TestShared_PartialHitIsTheNewestEntryNotTheLastListed(t *testing.T) {
	s := s3test.Start(t)
	a, b := sharedStore(t, s, ""), sharedStore(t, s, "")
	for _, k := range []string{"deps-a", "deps-c", "deps-b"} {
		if err := saveShared(t, a, "alice/app", k, map[string]string{"v": k}); err != nil {
			t.Fatal(err)
		}
	}
	f := b.Find(context.Background(), "alice/app", dirPaths, "deps-z", []string{"nothing-", "deps-"})
	defer f.Release()
	if f.Match != PartialHit || f.Entry.Key != "deps-b" || readFound(t, f)["v"] != "deps-b" {
		t.Fatalf("partial hit %+v (%v), want deps-b, the newest", f, readFound(t, f))
	}
	if f := b.Find(context.Background(), "alice/app", dirPaths, "deps-z", []string{"other-"}); f.Match != Miss || f.Fault != nil {
		t.Fatalf("no matching restore key: %+v, want a miss", f)
	}
}

// Crafted keys stay names of their own repository: another repository's
// restore keys find none of them, and each comes back whole under its own
// key (a key that escaped its encoding would overwrite, or be listed by,
// another).
func TestShared_CraftedKeysNeverReachAnotherRepository(t *testing.T) {
	s := s3test.Start(t)
	a, b := sharedStore(t, s, "p"), sharedStore(t, s, "p")
	long := strings.Repeat("k/../", 102) + "xy" // 512 bytes
	keys := []string{"../other", "a/../../x", "%2F", "%", "k", "k/..", long, long[:300], long[:256], long[:255]}
	for _, k := range keys {
		if err := saveShared(t, a, "alice/app", k, map[string]string{"v": k}); err != nil {
			t.Fatalf("save %q: %v", k, err)
		}
	}
	for _, k := range keys {
		f := b.Find(context.Background(), "alice/app", dirPaths, k, nil)
		if f.Match != Hit || readFound(t, f)["v"] != k {
			t.Errorf("key %q: %+v, content %v", k, f, readFound(t, f))
		}
		f.Release()
		// Another repository, whose own key is the crafted one.
		g := b.Find(context.Background(), "mallory/app", dirPaths, "x", []string{k, "../", "..", ".", "%", "k", "a"})
		if g.Match != Miss || g.Fault != nil {
			t.Errorf("mallory/app with restore key %q found %+v", k, g)
		}
		g.Release()
	}
	// Restore keys longer than the spelled 256 bytes are told apart by
	// the key in the metadata.
	f := b.Find(context.Background(), "alice/app", dirPaths, long[:301]+"z", []string{long[:290]})
	defer f.Release()
	if f.Match != PartialHit || (f.Entry.Key != long && f.Entry.Key != long[:300]) {
		t.Fatalf("long restore key: %+v", f)
	}
	// On disk, every object is a file whose name has "~", and no object
	// is a directory of another.
	var objs int
	filepath.WalkDir(filepath.Join(s.Dir, s.Bucket), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Name()) > 255 {
			t.Errorf("component of %d bytes: %s", len(d.Name()), p)
		}
		if !d.IsDir() {
			objs++
			if !strings.Contains(d.Name(), "~") {
				t.Errorf("object without ~: %s", p)
			}
		} else if strings.Contains(d.Name(), "~") {
			t.Errorf("directory with ~: %s", p)
		}
		return nil
	})
	if objs < len(keys) {
		t.Fatalf("%d objects for %d keys", objs, len(keys))
	}
}

func TestNames_OnlyHexUnderTheRepositoryAndWithinLengthBounds(t *testing.T) {
	long := strings.Repeat("\xff", MaxKeyLen)
	for _, k := range []string{"../other", "a/../../x", "%2F", long, "k", "k0"} {
		n := entryName("alice/app", []string{"a", "b"}, k)
		rest := strings.TrimPrefix(n, pathsPrefix("alice/app", []string{"a", "b"}))
		if !strings.HasPrefix(n, repoPrefix("alice/app")) || strings.Trim(rest, "0123456789abcdef/~.tzs") != "" {
			t.Errorf("key %q: name %q", k, n)
		}
		if len(n) > 622 || len(usedName(n)) > 622 {
			t.Errorf("key %q: name of %d bytes", k, len(n))
		}
		for _, c := range strings.Split(n, "/") {
			if len(c) > 166 || c == ".." || c == "." {
				t.Errorf("key %q: component %q", k, c)
			}
		}
		got, whole, ok := spelledKey(rest)
		if !ok || (whole && got != k) || (!whole && !strings.HasPrefix(k, got)) {
			t.Errorf("key %q read back as %q %v %v", k, got, whole, ok)
		}
	}
	// "k" and "k0": one's spelling is a prefix of the other's, but no
	// object is a prefix-directory of another.
	a, b := entryName("r", nil, "k"), entryName("r", nil, "k0")
	if strings.HasPrefix(b, a) || strings.HasPrefix(a, b) {
		t.Fatalf("%q and %q", a, b)
	}
	if p, _ := restorePrefix("r", nil, "k"); !strings.HasPrefix(b, p) || !strings.HasPrefix(a, p) {
		t.Fatalf("restore key k's prefix %q misses %q or %q", p, a, b)
	}
}

// A store killed in the middle of an upload leaves nothing a lookup
// restores, and the next save of the key works.
func TestShared_AHalfUploadedCacheIsNeverRestored(t *testing.T) {
	s := s3test.Start(t)
	p := s3test.NewProxy(t, s)
	cfg := s.Config("")
	cfg.URL = p.BucketURL(s, "")
	a := openStore(t, filepath.Join(t.TempDir(), "caches"), 0)
	bk, err := objstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Configure(Options{Bucket: bk, LookupTimeout: 5 * time.Second, IdleTimeout: 2 * time.Second, TransferTimeout: 20 * time.Second})
	big := randomText(t, 3<<20)
	p.AfterBytes(1<<20, s.Kill)
	if err := saveShared(t, a, "alice/app", "deps-1", map[string]string{"big": big}); err == nil {
		t.Fatal("an upload through a killed store succeeded")
	} else {
		t.Logf("upload: %v", err)
	}
	s.Restart(t)
	b := sharedStore(t, s, "")
	if f := b.Find(context.Background(), "alice/app", dirPaths, "deps-1", []string{"deps-"}); f.Match != Miss {
		f.Release()
		t.Fatalf("after a killed upload: %+v, want a miss", f)
	}
	if err := saveShared(t, b, "alice/app", "deps-1", map[string]string{"big": big}); err != nil {
		t.Fatalf("the next save: %v", err)
	}
	c := sharedStore(t, s, "")
	f := c.Find(context.Background(), "alice/app", dirPaths, "deps-1", nil)
	defer f.Release()
	if f.Match != Hit || readFound(t, f)["big"] != big {
		t.Fatalf("after the next save: %+v", f)
	}
}

// A byte changed in the store's copy is found by the checksum: a miss
// that says so, and the object is removed so the next save replaces it.
func TestShared_ADamagedEntryIsAMissAndIsRemoved(t *testing.T) {
	s := s3test.Start(t)
	a, b := sharedStore(t, s, ""), sharedStore(t, s, "")
	if err := saveShared(t, a, "alice/app", "deps-1", map[string]string{"f": randomText(t, 100<<10)}); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(s.Dir, s.Bucket, filepath.FromSlash(entryName("alice/app", dirPaths, "deps-1")))
	raw, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x55
	if err := os.WriteFile(obj, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	f := b.Find(context.Background(), "alice/app", dirPaths, "deps-1", nil)
	defer f.Release()
	if f.Match != Miss || !errors.Is(f.Fault, ErrDamaged) {
		t.Fatalf("damaged entry: %+v, want a miss with ErrDamaged", f)
	}
	t.Logf("fault: %v", f.Fault)
	if b.Has("alice/app", dirPaths, "deps-1") {
		t.Fatal("the damaged entry was committed to the disk")
	}
	if _, err := os.Stat(obj); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the damaged object is still in the store: %v", err)
	}
	if err := saveShared(t, b, "alice/app", "deps-1", map[string]string{"f": "fresh"}); err != nil {
		t.Fatalf("the save after a damaged entry: %v", err)
	}
}

func TestShared_TwoRunnersSavingOneKeyLeaveOneObjectAndTheSecondIsTold(t *testing.T) {
	s := s3test.Start(t)
	a, b := sharedStore(t, s, ""), sharedStore(t, s, "")
	if err := saveShared(t, a, "alice/app", "k", map[string]string{"v": "a"}); err != nil {
		t.Fatal(err)
	}
	if err := saveShared(t, b, "alice/app", "k", map[string]string{"v": "b"}); !errors.Is(err, ErrShared) {
		t.Fatalf("second save: %v, want ErrShared", err)
	}
	c := sharedStore(t, s, "")
	f := c.Find(context.Background(), "alice/app", dirPaths, "k", nil)
	defer f.Release()
	if readFound(t, f)["v"] != "a" {
		t.Fatalf("got %v, want the first save's", readFound(t, f))
	}
}

// setClock makes st's clock read at.
func setClock(st *Store, at time.Time) { st.now = func() time.Time { return at } }

func TestRetention_DiskRemovesUnusedAndEachRepositorysLeastRecentlyUsedPastItsBound(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "caches"), 0)
	st.Configure(Options{UnusedFor: 7 * 24 * time.Hour, RepoLimit: 250})
	t0 := time.Now()
	setClock(st, t0.Add(-10*24*time.Hour))
	save(t, st, "alice/app", "old", map[string]string{"f": strings.Repeat("o", 100)})
	save(t, st, "bob/app", "old", map[string]string{"f": strings.Repeat("o", 100)})
	setClock(st, t0.Add(-3*time.Hour))
	save(t, st, "alice/app", "a1", map[string]string{"f": strings.Repeat("1", 100)})
	setClock(st, t0.Add(-2*time.Hour))
	save(t, st, "alice/app", "a2", map[string]string{"f": strings.Repeat("2", 100)})
	save(t, st, "bob/app", "b1", map[string]string{"f": strings.Repeat("b", 100)})
	setClock(st, t0.Add(-time.Minute))
	save(t, st, "alice/app", "a3", map[string]string{"f": strings.Repeat("3", 100)})
	// bob's old entry is used again: kept.
	_, _, rel := st.Lookup("bob/app", dirPaths, "old", nil)
	rel()
	setClock(st, t0)
	removed, err := st.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range removed {
		got = append(got, r.Repo+" "+r.Key+" "+r.Why)
	}
	sort.Strings(got)
	if strings.Join(got, ", ") != "alice/app a1 repository size, alice/app old unused" {
		t.Fatalf("removed %v", got)
	}
	for _, k := range []string{"a2", "a3"} {
		if !st.Has("alice/app", dirPaths, k) {
			t.Errorf("alice/app %s was removed", k)
		}
	}
	if !st.Has("bob/app", dirPaths, "old") || !st.Has("bob/app", dirPaths, "b1") {
		t.Error("bob/app lost an entry")
	}
	if again, err := st.Sweep(context.Background()); err != nil || len(again) != 0 {
		t.Fatalf("a second sweep: %v, %v", again, err)
	}
}

// The bucket's last use is its marker's time: an entry restored recently
// stays, however old its object; the unused one goes, with its marker,
// and a second sweep (any runner's) finds nothing more to do.
func TestRetention_BucketRemovesEntriesUnusedByItsMarkersTime(t *testing.T) {
	s := s3test.Start(t)
	a := sharedStore(t, s, "")
	for _, k := range []string{"used", "unused"} {
		if err := saveShared(t, a, "alice/app", k, map[string]string{"v": k}); err != nil {
			t.Fatal(err)
		}
	}
	if n, size, err := a.Usage(context.Background(), "alice/app"); err != nil || n != 2 || size < 500 {
		t.Fatalf("usage in the bucket: %d entries, %d bytes, %v", n, size, err)
	}
	if n, _, err := a.Usage(context.Background(), "bob/app"); err != nil || n != 0 {
		t.Fatalf("bob/app's usage: %d entries, %v", n, err)
	}
	old := time.Now().Add(-10 * 24 * time.Hour)
	for _, k := range []string{"used", "unused"} {
		obj := filepath.Join(s.Dir, s.Bucket, filepath.FromSlash(entryName("alice/app", dirPaths, k)))
		if err := os.Chtimes(obj, old, old); err != nil {
			t.Fatal(err)
		}
	}
	b := sharedStore(t, s, "")
	f := b.Find(context.Background(), "alice/app", dirPaths, "used", nil)
	f.Release()
	b.Wait() // the marker
	c := sharedStore(t, s, "")
	c.Configure(Options{Bucket: c.Bucket(), UnusedFor: 7 * 24 * time.Hour})
	removed, err := c.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Key != "unused" || !removed[0].Bucket || removed[0].Why != "unused" {
		t.Fatalf("removed %+v", removed)
	}
	if f := sharedStore(t, s, "").Find(context.Background(), "alice/app", dirPaths, "unused", nil); f.Match != Miss {
		t.Fatalf("the removed entry is still found: %+v", f)
	}
	if f := sharedStore(t, s, "").Find(context.Background(), "alice/app", dirPaths, "used", nil); f.Match != Hit {
		t.Fatalf("the used entry is gone: %+v", f)
	}
	d := sharedStore(t, s, "")
	d.Configure(Options{Bucket: d.Bucket(), UnusedFor: 7 * 24 * time.Hour})
	if again, err := d.Sweep(context.Background()); err != nil || len(again) != 0 {
		t.Fatalf("a second sweep: %+v, %v", again, err)
	}
}

// A store that stops sending in the middle of a download holds the
// lookup only for IdleTimeout: then it is given up, a miss that says so.
func TestShared_AStalledDownloadIsGivenUpAfterTheIdleBound(t *testing.T) {
	s := s3test.Start(t)
	a := sharedStore(t, s, "")
	if err := saveShared(t, a, "alice/app", "k", map[string]string{"big": randomText(t, 16<<20)}); err != nil {
		t.Fatal(err)
	}
	p := s3test.NewProxy(t, s)
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) }) // before the proxy closes
	cfg := s.Config("")
	cfg.URL = p.BucketURL(s, "")
	bk, err := objstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := openStore(t, filepath.Join(t.TempDir(), "caches"), 0)
	b.Configure(Options{Bucket: bk, LookupTimeout: 5 * time.Second, IdleTimeout: time.Second, TransferTimeout: time.Minute})
	p.AfterBytes(1<<20, func() { <-unblock })
	start := time.Now()
	f := b.Find(context.Background(), "alice/app", dirPaths, "k", nil)
	took := time.Since(start)
	f.Release()
	if f.Match != Miss || f.Fault == nil || !strings.Contains(f.Fault.Error(), "no byte moved for 1s: given up") {
		t.Fatalf("stalled download: %+v", f)
	}
	if took > 10*time.Second {
		t.Fatalf("the stalled store held the lookup for %s", took)
	}
	t.Logf("%s: %v", took, f.Fault)
}

// Locate hands out what an environment needs to fetch an entry itself: a
// URL that reads the archive without credentials, and its length and
// SHA-256, which the bytes it reads match.
func TestShared_LocatePresignsTheArchiveItsSumAndLengthDescribe(t *testing.T) {
	s := s3test.Start(t)
	a := sharedStore(t, s, "p")
	for _, k := range []string{"deps-a", "deps-b"} {
		if err := saveShared(t, a, "alice/app", k, map[string]string{"v": k}); err != nil {
			t.Fatal(err)
		}
	}
	b := sharedStore(t, s, "p")
	r, err := b.Locate(context.Background(), "alice/app", dirPaths, "deps-z", []string{"deps-"}, time.Minute)
	if err != nil || r.Match != PartialHit || r.Key != "deps-b" || r.Compression != "zstd" {
		t.Fatalf("Locate = %+v, %v; want a partial hit of deps-b", r, err)
	}
	resp, err := http.Get(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET the presigned URL: %d, %v", resp.StatusCode, err)
	}
	sum := sha256.Sum256(body)
	if int64(len(body)) != r.Bytes || hex.EncodeToString(sum[:]) != r.SHA256 {
		t.Fatalf("read %d bytes, sha256 %x; Locate said %d, %s", len(body), sum, r.Bytes, r.SHA256)
	}
	if r, err := b.Locate(context.Background(), "mallory/app", dirPaths, "deps-b", []string{"deps-"}, time.Minute); err != nil || r.Match != Miss {
		t.Fatalf("another repository: %+v, %v", r, err)
	}
}
