package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// A Unix socket address holds at most 107 bytes of path, and work
// directories (a test's temporary directory, a deep PVC mount) can be
// longer. Both ends therefore reach the socket through /proc/self/fd/N/NAME,
// where N is an O_PATH descriptor of the socket's directory: a short path
// that names the same file.

// ListenUnix listens on a Unix socket at path (mode 0600, whatever its
// length), replacing a stale socket file there.
func ListenUnix(path string) (net.Listener, error) {
	var l net.Listener
	err := viaDir(path, func(short string) error {
		_ = os.Remove(short)
		old := syscall.Umask(0o177)
		defer syscall.Umask(old)
		var err error
		l, err = net.Listen("unix", short)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The listener would unlink the short name on Close; the file is the
	// caller's to remove.
	if ul, ok := l.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	return l, nil
}

// DialUnix connects to the Unix socket at path, whatever its length.
func DialUnix(ctx context.Context, path string) (net.Conn, error) {
	var c net.Conn
	err := viaDir(path, func(short string) error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "unix", short)
		return err
	})
	return c, err
}

func viaDir(path string, f func(short string) error) error {
	if len(path) < 100 {
		return f(path)
	}
	fd, err := syscall.Open(filepath.Dir(path), oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer syscall.Close(fd)
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(path)))
}

// oPath is open(2)'s O_PATH (Linux), which package syscall does not name.
const oPath = 0x200000
