package cache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

var dirPaths = []string{"dir"}

// openStore opens the store in dir with a clock that moves one second
// each time it is read, so that saves and uses are ordered without sleeping.
func openStore(t *testing.T, dir string, limit int64) *Store {
	t.Helper()
	s, err := Open(dir, limit, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	at := time.Now().Truncate(time.Second)
	s.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		at = at.Add(time.Second)
		return at
	}
	return s
}

// save stores files (relative path → content) as path 0 of repo's key.
func save(t *testing.T, s *Store, repo, key string, files map[string]string) (*Entry, []*Entry, error) {
	t.Helper()
	st, err := s.Begin(repo, key, []string{"dir"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, st.PathDir(0), files)
	return st.Commit()
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStore_ExactKeyIsHitRestoreKeyPicksNewestElseMiss(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	for _, k := range []string{"gomod-old", "gomod-new", "npm-x"} {
		if _, _, err := save(t, s, "alice/app", k, map[string]string{"f": k}); err != nil {
			t.Fatal(err)
		}
	}
	e, m, release := s.Lookup("alice/app", dirPaths, "gomod-old", []string{"gomod-"})
	release()
	if m != Hit || e.Key != "gomod-old" {
		t.Fatalf("exact key: %v %+v", m, e)
	}
	e, m, release = s.Lookup("alice/app", dirPaths, "gomod-abc", []string{"nothing-", "gomod-"})
	release()
	if m != PartialHit || e.Key != "gomod-new" {
		t.Fatalf("restore key: %v %+v, want partial hit of the newest, gomod-new", m, e)
	}
	if b, err := os.ReadFile(filepath.Join(e.PathDir(0), "f")); err != nil || string(b) != "gomod-new" {
		t.Fatalf("entry's file: %q %v", b, err)
	}
	if _, m, release = s.Lookup("alice/app", dirPaths, "cargo-1", []string{"cargo-"}); m != Miss {
		t.Fatalf("want miss, got %v", m)
	}
	release()
}

func TestStore_OtherRepositoryNeverRestored(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	if _, _, err := save(t, s, "alice/app", "deps-1", map[string]string{"f": "alice's"}); err != nil {
		t.Fatal(err)
	}
	for _, rk := range [][]string{nil, {"deps-"}, {""}} {
		if e, m, release := s.Lookup("mallory/app", dirPaths, "deps-1", rk); m != Miss || e != nil {
			t.Fatalf("mallory/app found alice/app's entry with restore keys %q: %v %+v", rk, m, e)
		} else {
			release()
		}
	}
	// Also after a restart (the index read back from disk).
	s2 := openStore(t, s.Dir(), 0)
	if _, m, release := s2.Lookup("mallory/app", dirPaths, "deps-1", []string{""}); m != Miss {
		t.Fatalf("after reopening: %v", m)
	} else {
		release()
	}
	if _, m, release := s2.Lookup("alice/app", dirPaths, "deps-1", nil); m != Hit {
		t.Fatalf("alice's own entry after reopening: %v", m)
	} else {
		release()
	}
}

func TestStore_ConcurrentSavesOfOneKeyLeaveOneWholeEntry(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.Begin("alice/app", "k", []string{"dir"})
			if err != nil {
				errs[i] = err
				return
			}
			files := map[string]string{}
			for j := range 50 {
				files[fmt.Sprintf("f%02d", j)] = strings.Repeat(fmt.Sprint(i), 1000)
			}
			writeFiles(t, st.PathDir(0), files)
			_, _, errs[i] = st.Commit()
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrExists):
			t.Fatalf("save: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d saves won, want exactly 1", won)
	}
	e, m, release := s.Lookup("alice/app", dirPaths, "k", nil)
	defer release()
	if m != Hit {
		t.Fatal("no entry")
	}
	// Whole: every file of one writer, none of another.
	des, _ := os.ReadDir(e.PathDir(0))
	if len(des) != 50 {
		t.Fatalf("entry has %d files, want 50", len(des))
	}
	first, _ := os.ReadFile(filepath.Join(e.PathDir(0), "f00"))
	for _, de := range des {
		b, _ := os.ReadFile(filepath.Join(e.PathDir(0), de.Name()))
		if !bytes.Equal(b, first) || len(b) != 1000 {
			t.Fatalf("%s differs from f00: a torn entry", de.Name())
		}
	}
	if tmp, _ := os.ReadDir(s.tmp()); len(tmp) != 0 {
		t.Fatalf("losing saves left %d directories in tmp/", len(tmp))
	}
}

func TestStore_EvictsLeastRecentlyUsedPastCacheSize(t *testing.T) {
	s := openStore(t, t.TempDir(), 2500)
	big := strings.Repeat("x", 1000)
	for _, k := range []string{"a", "b"} {
		if _, _, err := save(t, s, "alice/app", k, map[string]string{"f": big}); err != nil {
			t.Fatal(err)
		}
	}
	// Using a makes b the least recently used.
	_, _, release := s.Lookup("alice/app", dirPaths, "a", nil)
	release()
	_, evicted, err := save(t, s, "alice/app", "c", map[string]string{"f": big})
	if err != nil {
		t.Fatal(err)
	}
	if len(evicted) != 1 || evicted[0].Key != "b" {
		t.Fatalf("evicted %+v, want b only", evicted)
	}
	if s.Has("alice/app", dirPaths, "b") || !s.Has("alice/app", dirPaths, "a") || !s.Has("alice/app", dirPaths, "c") {
		t.Fatal("want a and c kept, b gone")
	}
	if s.Size() > s.Limit() {
		t.Fatalf("size %d over limit %d", s.Size(), s.Limit())
	}
	if des, err := os.ReadDir(filepath.Join(s.Dir(), "repos", ID("alice/app"))); err != nil || len(des) != 2 {
		t.Fatalf("%d entry directories (%v), want 2: b's is still there", len(des), err)
	}
	// An entry larger than the whole bound is refused, and evicts nothing.
	_, _, err = save(t, s, "alice/app", "huge", map[string]string{"f": strings.Repeat("y", 3000)})
	if !errors.Is(err, ErrTooBig) {
		t.Fatalf("huge entry: %v", err)
	}
	if !s.Has("alice/app", dirPaths, "a") || !s.Has("alice/app", dirPaths, "c") {
		t.Fatal("a refused entry evicted others")
	}
	// A smaller bound at the next start evicts down to it.
	s2 := openStore(t, s.Dir(), 1500)
	if got := len(s2.Entries()); got != 1 || s2.Size() > 1500 {
		t.Fatalf("after reopening with a smaller bound: %d entries, %d bytes", got, s2.Size())
	}
}

func TestStore_PinnedEntryIsNotEvictedWhileRestoring(t *testing.T) {
	s := openStore(t, t.TempDir(), 1500)
	big := strings.Repeat("x", 1000)
	if _, _, err := save(t, s, "alice/app", "a", map[string]string{"f": big}); err != nil {
		t.Fatal(err)
	}
	e, _, release := s.Lookup("alice/app", dirPaths, "a", nil)
	if _, evicted, err := save(t, s, "alice/app", "b", map[string]string{"f": big}); err != nil || len(evicted) != 0 {
		t.Fatalf("save b: evicted %+v, %v", evicted, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.PathDir(0), "f")); err != nil || len(b) != 1000 {
		t.Fatalf("a pinned entry's file went away: %v", err)
	}
	release()
}

// TestStore_KilledSaveIsSweptAtOpen kills a real process in the middle of
// writing a save and checks that the next Open shows no trace of it.
func TestStore_KilledSaveIsSweptAtOpen(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSaveForever$")
	cmd.Env = append(os.Environ(), "KNOTLESS_CACHE_HELPER_DIR="+dir)
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	testwait.Until(t, 30*time.Second, "the helper to write part of the save", func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(dir, "tmp", "save-*", "0", "f00005"))
		return len(m) > 0, out.String()
	})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if m, _ := filepath.Glob(filepath.Join(dir, "tmp", "save-*")); len(m) == 0 {
		t.Fatal("no torn save left to sweep")
	}
	s := openStore(t, dir, 0)
	if tmp, _ := os.ReadDir(s.tmp()); len(tmp) != 0 {
		t.Fatalf("tmp/ still holds %d entries", len(tmp))
	}
	if len(s.Entries()) != 0 || s.Has("alice/app", dirPaths, "killed") {
		t.Fatalf("the killed save shows: %+v", s.Entries())
	}
}

func TestHelperSaveForever(t *testing.T) {
	dir := os.Getenv("KNOTLESS_CACHE_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process of TestStore_KilledSaveIsSweptAtOpen")
	}
	s := openStore(t, dir, 0)
	st, err := s.Begin("alice/app", "killed", []string{"dir"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		writeFiles(t, st.PathDir(0), map[string]string{fmt.Sprintf("f%05d", i): "data"})
		time.Sleep(time.Millisecond)
	}
}

func TestStore_EntryOfOtherPathsIsNotRestored(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	if _, _, err := save(t, s, "alice/app", "deps-1", map[string]string{"f": "x"}); err != nil {
		t.Fatal(err)
	}
	if _, m, release := s.Lookup("alice/app", []string{"node_modules"}, "deps-1", []string{"deps-"}); m != Miss {
		t.Fatalf("an entry saved for other paths: %v", m)
	} else {
		release()
	}
}

func TestCheckKey_RefusesEmptyLongCommaAndControl(t *testing.T) {
	for _, k := range []string{"", strings.Repeat("k", MaxKeyLen+1), "a,b", "a\nb"} {
		if CheckKey(k) == nil {
			t.Errorf("CheckKey(%q) accepted", k)
		}
	}
	if err := CheckKey("gomod-" + strings.Repeat("f", 64)); err != nil {
		t.Error(err)
	}
}
