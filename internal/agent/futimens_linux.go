package agent

import (
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setTimes sets f's access and modification times to mtime through its
// descriptor: utimensat(2) with a NULL path, what futimens(3) calls (no
// path walk; an os.Root's Chtimes walks the path one openat at a time,
// which gVisor makes dear).
func setTimes(f *os.File, mtime time.Time) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if errno != 0 {
			serr = &os.PathError{Op: "futimens", Path: f.Name(), Err: errno}
		}
	}); err != nil {
		return err
	}
	return serr
}
