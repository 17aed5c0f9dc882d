package cleanup

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/testenv"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "skipped: needs root to make bind mounts (run the tests as root to check that cleanup never crosses a mount)")
	}
}

// bindMount bind-mounts src on dst and undoes it when the test ends, if the
// code under test did not.
func bindMount(t *testing.T, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		testenv.Skipf(t, "skipped: cannot bind-mount here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
}

func canary(t *testing.T) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "canary")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{file, filepath.Join(dir, "sub", "deep")} {
		if err := os.WriteFile(f, []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, file
}

func assertIntact(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"canary", "sub/deep"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != "keep me" {
			t.Errorf("the mount's source lost %s: %q, %v", f, b, err)
		}
	}
}

// TestRemoveAll_BindMountLeftInWorkspaceKeepsItsSource: a step bind-mounted
// a host directory into its workspace and left it mounted; cleanup must
// detach it, not delete the host directory's contents.
func TestRemoveAll_BindMountLeftInWorkspaceKeepsItsSource(t *testing.T) {
	needRoot(t)
	src, _ := canary(t)
	run := filepath.Join(t.TempDir(), "runs", "7")
	mnt := filepath.Join(run, "workspace", "chroot", "host")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "workspace", "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	bindMount(t, src, mnt)
	// A second, nested mount below the first one.
	src2, _ := canary(t)
	if err := os.MkdirAll(filepath.Join(run, "workspace", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	bindMount(t, src2, filepath.Join(run, "workspace", "b"))
	bindMount(t, src2, filepath.Join(run, "workspace", "b", "sub"))

	if err := RemoveAll(run, nil); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	assertIntact(t, src)
	assertIntact(t, src2)
	if _, err := os.Lstat(run); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run directory is still there: %v", err)
	}
}

// TestRemoveAll_SessionDirIsAMountPoint: the directory to remove is itself
// a mount point (a step mounted over its session directory).
func TestRemoveAll_SessionDirIsAMountPoint(t *testing.T) {
	needRoot(t)
	src, _ := canary(t)
	sess := filepath.Join(t.TempDir(), "sessions", "s1")
	if err := os.MkdirAll(sess, 0o700); err != nil {
		t.Fatal(err)
	}
	bindMount(t, src, sess)
	if err := RemoveAll(sess, nil); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	assertIntact(t, src)
	if _, err := os.Lstat(sess); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the session directory is still there: %v", err)
	}
}

// TestRemoveAll_BindMountedFileKeepsItsSource: a single file bind-mounted
// over a file in the workspace.
func TestRemoveAll_BindMountedFileKeepsItsSource(t *testing.T) {
	needRoot(t)
	_, file := canary(t)
	run := t.TempDir() + "/run"
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(run, "resolv.conf")
	if err := os.WriteFile(dst, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bindMount(t, file, dst)
	if err := RemoveAll(run, nil); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the mounted file's source: %q, %v", b, err)
	}
	if _, err := os.Lstat(run); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run directory is still there: %v", err)
	}
}

// TestRemoveAll_SymlinkOutsideIsNotFollowed: links to outside the directory
// are removed as links.
func TestRemoveAll_SymlinkOutsideIsNotFollowed(t *testing.T) {
	src, _ := canary(t)
	run := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(filepath.Join(run, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(src, filepath.Join(run, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(run, nil); err != nil {
		t.Fatal(err)
	}
	assertIntact(t, src)
	if _, err := os.Lstat(run); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("still there: %v", err)
	}
}

// TestRemoveAll_ReadOnlyDirectories: Go's module cache leaves 0555
// directories; they are removed all the same.
func TestRemoveAll_ReadOnlyDirectories(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	deep := filepath.Join(run, "mod", "x@v1", "y")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{deep, filepath.Dir(deep), filepath.Join(run, "mod")} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(run, "mod"), 0); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(run, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(run); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("still there: %v", err)
	}
	if err := RemoveAll(run, nil); err != nil {
		t.Errorf("a missing directory: %v", err)
	}
}
