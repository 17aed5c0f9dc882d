package server

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropUnit is the unit in which dropBehind hands a growing log to the disk.
const dropUnit = 8 << 20

// dropBehind keeps a long log that is being written from filling the page
// cache: a log is written once and read rarely, mostly at its end (people
// following a run). Each time an append [before, after) completes a
// dropUnit, the unit is written back at once (asynchronously), and the
// unit two before it, whose writeback is done by then, leaves the page
// cache; the last two units stay for followers. Best effort: pages still
// dirty are simply kept.
func dropBehind(f *os.File, before, after int64) {
	for b := (before/dropUnit + 1) * dropUnit; b <= after; b += dropUnit {
		fd := int(f.Fd())
		_ = unix.SyncFileRange(fd, b-dropUnit, dropUnit, unix.SYNC_FILE_RANGE_WRITE)
		if b >= 3*dropUnit {
			_ = unix.Fadvise(fd, b-3*dropUnit, dropUnit, unix.FADV_DONTNEED)
		}
	}
}
