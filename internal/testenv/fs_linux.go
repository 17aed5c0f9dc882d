package testenv

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size bytes at a new temporary directory and
// returns it; it is unmounted when the test ends. Not root, or a mount
// refused: Skipf (so it fails with KNOTLESS_TEST_MACHINE_REQUIRED=1).
// tmpfs punches holes and is never the file system of t.TempDir() on
// CI's disk, which is what its callers need.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Skipf(t, "needs root to mount a tmpfs of its own")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		Skipf(t, "mount a tmpfs at %s: %v", dir, err)
	}
	// Cleanups run last-in first-out: unmount before TempDir removes dir.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the test's tmpfs at %s: %v", dir, err)
		}
	})
	return dir
}

// OtherFileSystem returns a directory for the test on a file system other
// than near's: $KNOTLESS_TEST_OTHER_FS when set, else /dev/shm when it is
// one, else a tmpfs the test mounts (Tmpfs). A directory it makes inside
// another one is removed when the test ends.
func OtherFileSystem(t testing.TB, near string) string {
	t.Helper()
	var n syscall.Stat_t
	if err := syscall.Stat(near, &n); err != nil {
		t.Fatalf("stat %s: %v", near, err)
	}
	other := os.Getenv("KNOTLESS_TEST_OTHER_FS")
	if other == "" {
		other = "/dev/shm"
	}
	var o syscall.Stat_t
	if syscall.Stat(other, &o) == nil && o.Dev != n.Dev {
		if dir, err := os.MkdirTemp(other, "knotless-test-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return Tmpfs(t, "256m")
}
