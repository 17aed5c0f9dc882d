package testenv

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// OtherFileSystem gives a directory whose device differs from the one it
// is asked to be away from, and a tmpfs of Tmpfs's punches holes: what the
// tests that used to skip for want of either need.
func TestOtherFileSystem_IsAnotherDeviceAndTmpfsPunchesHoles(t *testing.T) {
	near := t.TempDir()
	other := OtherFileSystem(t, near)
	var a, b syscall.Stat_t
	if err := syscall.Stat(near, &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(other, &b); err != nil {
		t.Fatal(err)
	}
	if a.Dev == b.Dev {
		t.Fatalf("%s and %s are on one file system (device %d)", near, other, a.Dev)
	}

	dir := Tmpfs(t, "1m")
	f, err := os.CreateTemp(dir, "punch")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096); err != nil {
		t.Fatalf("punch a hole in a file on the test's tmpfs: %v", err)
	}
}
