package executortest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
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
