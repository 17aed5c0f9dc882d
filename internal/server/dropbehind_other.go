//go:build !linux

package server

import "os"

// dropBehind does nothing where the kernel has no sync_file_range (the
// Linux dropBehind says what it saves): the page cache keeps the log.
func dropBehind(f *os.File, before, after int64) {}
