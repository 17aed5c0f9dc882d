package executortest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/executor"
)

// writeTemp writes data to a new host file and returns its path.
func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// entry is what a copy must keep of one file-tree entry.
type entry struct {
	mode   fs.FileMode // type and permission bits
	sum    [32]byte    // sha256 of a regular file's bytes
	size   int64
	target string // a symlink's target
}

// snapshot describes the tree at root, by slash path relative to root.
func snapshot(t *testing.T, root string) map[string]entry {
	t.Helper()
	m := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		e := entry{mode: fi.Mode() & (fs.ModeType | fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.target, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.sum, e.size = sha256.Sum256(b), int64(len(b))
		}
		m[filepath.ToSlash(rel)] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustWrite(t *testing.T, path string, data []byte, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func testCopyRoundTrip(t *testing.T, s executor.Session, env Env) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "src")
	big := randBytes(t, 3<<20+7)
	mustWrite(t, filepath.Join(src, "empty.txt"), nil, 0o644)
	mustWrite(t, filepath.Join(src, "small.bin"), randBytes(t, 1000), 0o600)
	mustWrite(t, filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	mustWrite(t, filepath.Join(src, "sub", "big.bin"), big, 0o640)
	mustWrite(t, filepath.Join(src, "sub", "deeper", "readonly.txt"), []byte("read only\n"), 0o444)
	if err := os.Chmod(filepath.Join(src, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/big.bin", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("does/not/exist", filepath.Join(src, "dangling")); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, src)

	if err := s.CopyIn(ctx, src, "in/tree"); err != nil {
		t.Fatalf("CopyIn directory: %v", err)
	}
	single := randBytes(t, 100_000)
	if err := s.CopyIn(ctx, writeTemp(t, single), "in/single/file.bin"); err != nil {
		t.Fatalf("CopyIn file: %v", err)
	}
	// The step sees what was copied in, links as links, and makes a file.
	res, out := run(t, s, executor.Step{Script: "test -L in/tree/link\ntest ! -e in/tree/dangling\ntest -L in/tree/dangling\n./in/tree/run.sh\ncat in/tree/link in/single/file.bin > made.bin\n"})
	assertResult(t, res, 0, "", out)
	if string(out) != "ran\n" {
		t.Errorf("output %q, want %q", out, "ran\n")
	}

	dst := filepath.Join(t.TempDir(), "out")
	if err := s.CopyOut(ctx, "in/tree", dst); err != nil {
		t.Fatalf("CopyOut directory: %v", err)
	}
	got := snapshot(t, dst)
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: missing after the round trip", name)
		} else if g != w {
			t.Errorf("%s: got mode %v size %d target %q, want mode %v size %d target %q (or different bytes)", name, g.mode, g.size, g.target, w.mode, w.size, w.target)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: appeared in the round trip", name)
		}
	}

	made := filepath.Join(t.TempDir(), "made.bin")
	if err := s.CopyOut(ctx, "made.bin", made); err != nil {
		t.Fatalf("CopyOut file: %v", err)
	}
	b, err := os.ReadFile(made)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, append(big, single...)) {
		t.Errorf("made.bin: %d bytes, sha256 %x; want %d bytes, sha256 %x", len(b), sha256.Sum256(b), len(big)+len(single), sha256.Sum256(append(big, single...)))
	}

	if err := s.CopyOut(ctx, "no/such/file", filepath.Join(t.TempDir(), "x")); err == nil {
		t.Errorf("CopyOut of a missing path returned no error")
	}
}

// What a workflow's `outputs:` copy out: a tree the steps made (not one
// copied in), named with a trailing slash, nested, with a file larger than
// one copy chunk, relative and absolute symbolic links (copied as links,
// never followed) and a directory's own mode.
func testCopyOutStepMadeTree(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Script: `mkdir -p dist/a/b
head -c 6291459 /dev/urandom > dist/a/b/big.bin
printf 'top\n' > dist/top.txt
: > dist/empty
ln -s a/b/big.bin dist/rel-link
ln -s /etc/passwd dist/abs-link
chmod 750 dist/a
sha256sum dist/a/b/big.bin
`})
	assertResult(t, res, 0, "", out)
	wantSum, _, _ := strings.Cut(string(out), " ")
	dst := filepath.Join(t.TempDir(), "outputs", "dist")
	if err := s.CopyOut(context.Background(), "dist/", dst); err != nil {
		t.Fatalf("CopyOut dist/: %v", err)
	}
	got := snapshot(t, dst)
	big := got["a/b/big.bin"]
	if fmt.Sprintf("%x", big.sum) != wantSum || big.size != 6291459 {
		t.Errorf("big.bin: %d bytes, sha256 %x; the step made 6291459 bytes, sha256 %s", big.size, big.sum, wantSum)
	}
	for name, want := range map[string]entry{
		"rel-link": {mode: fs.ModeSymlink | 0o777, target: "a/b/big.bin"},
		"abs-link": {mode: fs.ModeSymlink | 0o777, target: "/etc/passwd"},
	} {
		if g := got[name]; g.mode.Type() != fs.ModeSymlink || g.target != want.target {
			t.Errorf("%s: mode %v target %q; want a symbolic link to %q, not followed", name, g.mode, g.target, want.target)
		}
	}
	if g := got["a"]; g.mode != fs.ModeDir|0o750 {
		t.Errorf("dist/a: mode %v, want drwxr-x---", g.mode)
	}
	if g, ok := got["empty"]; !ok || g.size != 0 || !g.mode.IsRegular() {
		t.Errorf("dist/empty: %+v, want an empty regular file", g)
	}
	if len(got) != 8 {
		t.Errorf("copied %d entries, want 8 (., a, a/b, a/b/big.bin, top.txt, empty, rel-link, abs-link)", len(got))
	}
}

// A path that does not exist is an error wrapping fs.ErrNotExist (the
// runner says "does not exist" instead of failing), and nothing is made
// at the destination.
func testCopyOutMissingIsNotExist(t *testing.T, s executor.Session, env Env) {
	dst := filepath.Join(t.TempDir(), "out")
	err := s.CopyOut(context.Background(), "coverage.out", dst)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("CopyOut of a missing path: %v, want an error wrapping fs.ErrNotExist", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CopyOut of a missing path made %s (%v)", dst, err)
	}
}

// A relative path is confined to the workdir: a symbolic link the steps
// made to / is copied as a link, and a path through it is refused.
func testCopyOutThroughLinkLeavingWorkdirRefused(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Script: "ln -s / escape\nln -s /etc/passwd coverage.out\n"})
	assertResult(t, res, 0, "", out)
	dst := filepath.Join(t.TempDir(), "out")
	if err := s.CopyOut(context.Background(), "escape/etc/passwd", dst); err == nil {
		t.Errorf("CopyOut through a link leaving the workdir succeeded")
	}
	if err := s.CopyOut(context.Background(), "coverage.out", dst); err != nil {
		t.Fatalf("CopyOut of a link: %v", err)
	}
	if target, err := os.Readlink(dst); err != nil || target != "/etc/passwd" {
		t.Errorf("CopyOut of a link gave %q, %v; want the link itself, to /etc/passwd", target, err)
	}
}
