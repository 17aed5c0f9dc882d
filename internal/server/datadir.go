package server

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LockFile is the file in the data directory a running server holds an
// exclusive flock(2) on, from New until Close; it holds that server's PID.
const LockFile = ".lock"

// InUseError is New's error when another process holds the data
// directory's lock.
type InUseError struct {
	Dir string // the data directory, absolute
	PID int    // the holder's PID as its lock file says; 0 if unreadable
}

func (e *InUseError) Error() string {
	pid := "unknown"
	if e.PID > 0 {
		pid = strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by another knotless-server (pid %s)", e.Dir, pid)
}

// lockDataDir takes the lock of dir (which must exist) and writes this
// process's PID into the lock file: exclusive for a server on SQLite,
// shared for the replicas of a PostgreSQL database (shared), which use one
// data directory together, so that neither kind starts beside the other.
// It fails at once with an *InUseError when another process (or another
// Server of this one) holds it in a way that excludes this one. Closing the returned file releases the lock; the kernel releases it
// too when the process dies, so a crash leaves no stale lock.
func lockDataDir(dir string, shared bool) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file of the data directory: %w", err)
	}
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &InUseError{Dir: dir, PID: holderPID(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if shared {
		return f, nil // the replicas' PIDs would overwrite each other
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write PID to %s: %w", path, err)
	}
	return f, nil
}

// holderPID reads the PID in a held lock file. The holder writes it just
// after taking the lock, so an empty file is read again for a moment.
func holderPID(path string) int {
	for range 10 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// CheckDataDir reports whether a running server holds dir: an *InUseError
// if so, nil if not (or if dir or its lock file does not exist yet). It only
// looks; New takes the lock. knotless-server calls it before listening, so
// a second start on the same directory and address names the directory,
// not the port.
func CheckDataDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(abs, LockFile)
	f, err := os.Open(path)
	if err != nil {
		return nil // no lock file: nobody holds it
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return &InUseError{Dir: abs, PID: holderPID(path)}
		}
		return nil
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// CheckURL validates a public base URL (Config.URL, flag --url) and returns
// it without trailing slashes. It must be an absolute http:// or https://
// URL with a host, and no user, query or fragment: clone URLs and the
// runners' API base are made by appending paths to it.
func CheckURL(raw string) (string, error) {
	want := "want an absolute http:// or https:// URL with a host, e.g. https://ci.example.com or http://10.0.0.5:8080"
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--url %q is not a URL (%v): %s", raw, unwrapURLError(err), want)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("--url %q has no http:// or https:// scheme: %s", raw, want)
	case u.Opaque != "" || u.Hostname() == "":
		return "", fmt.Errorf("--url %q has no host: %s", raw, want)
	case u.User != nil:
		return "", fmt.Errorf("--url %q holds a user name or password: give the bare URL; clients send their own tokens", raw)
	case u.RawQuery != "" || u.ForceQuery:
		return "", fmt.Errorf("--url %q has a query (?...): %s", raw, want)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "", fmt.Errorf("--url %q has a fragment (#...): %s", raw, want)
	}
	return strings.TrimRight(raw, "/"), nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
