package executortest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"knotless.dev/knotless/internal/executor"
)

// What the runner's caches do through executor.Cacher, in the checkout and
// under HOME: a restored tree keeps bytes, modes and links; a step that
// changes a restored file changes the environment's copy only, never the
// entry on the runner's disk; a save brings back what the step left; a
// missing path is fs.ErrNotExist.
func testCacheRestoreStepSave(t *testing.T, s executor.Session, env Env) {
	c, ok := s.(executor.Cacher)
	if !ok {
		t.Skip("the session has no cache seam (executor.Cacher): the runner uses CopyIn and CopyOut")
	}
	ctx := context.Background()
	home, err := c.Home(ctx)
	if err != nil || !filepath.IsAbs(home) {
		t.Fatalf("Home: %q, %v", home, err)
	}
	entry := filepath.Join(t.TempDir(), "entry")
	mustWrite(t, filepath.Join(entry, "lib.txt"), []byte("v1\n"), 0o644)
	mustWrite(t, filepath.Join(entry, "sub", "tool"), []byte("#!/bin/sh\necho tool\n"), 0o755)
	if err := os.Symlink("sub/tool", filepath.Join(entry, "link")); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, entry)
	for _, dst := range []string{s.Workdir() + "/vendor/deps", home + "/.cache/tool"} {
		if err := c.RestoreCache(ctx, entry, dst); err != nil {
			t.Fatalf("RestoreCache to %s: %v", dst, err)
		}
		res, out := run(t, s, executor.Step{Script: "cd " + dst + "\ntest -L link\n./link\necho changed >> lib.txt\necho new > new.txt\n"})
		assertResult(t, res, 0, "", out)
		if string(out) != "tool\n" {
			t.Errorf("%s: output %q", dst, out)
		}
		if got := snapshot(t, entry); len(got) != len(want) || got["lib.txt"] != want["lib.txt"] {
			t.Fatalf("%s: a step's change reached the entry on the runner's disk", dst)
		}
		stage := filepath.Join(t.TempDir(), "stage")
		if err := c.SaveCache(ctx, dst, stage); err != nil {
			t.Fatalf("SaveCache of %s: %v", dst, err)
		}
		if b, err := os.ReadFile(filepath.Join(stage, "lib.txt")); err != nil || string(b) != "v1\nchanged\n" {
			t.Errorf("%s: saved lib.txt %q, %v", dst, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(stage, "new.txt")); err != nil || string(b) != "new\n" {
			t.Errorf("%s: saved new.txt %q, %v", dst, b, err)
		}
		if l, err := os.Readlink(filepath.Join(stage, "link")); err != nil || l != "sub/tool" {
			t.Errorf("%s: saved link %q, %v", dst, l, err)
		}
	}
	err = c.SaveCache(ctx, s.Workdir()+"/no/such/dir", filepath.Join(t.TempDir(), "stage"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SaveCache of a missing path: %v, want fs.ErrNotExist", err)
	}
}
