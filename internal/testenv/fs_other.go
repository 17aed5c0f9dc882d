//go:build !linux

package testenv

import "testing"

// Tmpfs: a tmpfs is Linux's; elsewhere Skipf.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	Skipf(t, "mounts a tmpfs, which needs Linux")
	return ""
}

// OtherFileSystem: see fs_linux.go; elsewhere Skipf.
func OtherFileSystem(t testing.TB, near string) string {
	t.Helper()
	Skipf(t, "mounts a tmpfs, which needs Linux")
	return ""
}
