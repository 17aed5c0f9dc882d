package logship

import (
	"os"
	"syscall"
)

// punchHole gives back the disk blocks of f's bytes [off, off+n) and keeps
// its size (fallocate FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE): the bytes
// read as zeros. Its error is the file system's (EOPNOTSUPP without holes).
func punchHole(f *os.File, off, n int64) error {
	const punch, keepSize = 0x02, 0x01 // FALLOC_FL_PUNCH_HOLE, FALLOC_FL_KEEP_SIZE
	return syscall.Fallocate(int(f.Fd()), punch|keepSize, off, n)
}

// preallocate gives f n bytes of disk blocks (fallocate mode 0).
func preallocate(f *os.File, n int64) error {
	return syscall.Fallocate(int(f.Fd()), 0, 0, n)
}
