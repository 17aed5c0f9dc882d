package shell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"knotless.dev/knotless/internal/executor"
)

// ErrClosed is returned by Exec, CopyIn and CopyOut once Cleanup was called.
var ErrClosed = errors.New("shell session is cleaned up")

// session is one run's environment: the checkout plus a private directory
// for step scripts.
type session struct {
	exe     *Executor
	id      string
	dir     string // private session directory, 0700
	workdir string // the checkout, absolute, symlinks resolved
	home    string // HOME of the steps, dir/home

	mu       sync.Mutex
	closed   bool
	closing  chan struct{} // closed by the first Cleanup
	execDone chan struct{} // non-nil while Exec runs; closed when it returns
}

// Handle names the session; the shell executor cannot recover it yet.
func (s *session) Handle() executor.Handle { return executor.Handle{Executor: Name, ID: s.id} }

// Detach is not supported yet: it does nothing.
func (s *session) Detach() error { return nil }

// ID returns Spec.ID.
func (s *session) ID() string { return s.id }

// Workdir returns the checkout's absolute host path (symlinks resolved).
func (s *session) Workdir() string { return s.workdir }

// beginExec marks an Exec as running. It fails after Cleanup and when an
// Exec already runs.
func (s *session) beginExec() (chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.execDone != nil {
		return nil, errors.New("another step is running in this session")
	}
	s.execDone = make(chan struct{})
	return s.execDone, nil
}

func (s *session) endExec(done chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(done)
	s.execDone = nil
}

// Cleanup stops a running step at once (SIGKILL to its process group, no
// grace), waits for its Exec to return, and removes the session directory.
// The checkout itself belongs to the runner and stays. Only the first call
// does work; later and concurrent calls return nil. When ctx ends before the
// running Exec has returned, the directory is removed anyway and an error
// says the step had not ended yet.
func (s *session) Cleanup(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	running := s.execDone
	s.mu.Unlock()
	defer s.exe.forget(s)

	var waitErr error
	if running != nil {
		select {
		case <-running:
		case <-ctx.Done():
			waitErr = fmt.Errorf("clean up shell session %s: the running step had not ended: %w", s.id, ctx.Err())
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return errors.Join(waitErr, fmt.Errorf("clean up shell session %s: %w", s.id, err))
	}
	return waitErr
}

// isClosed reports whether Cleanup was called.
func (s *session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// CopyIn copies the host file or directory src to dst, a path relative to
// the checkout (or absolute). Directories are copied recursively and merged
// into an existing directory; modes (including setuid, setgid, sticky) and
// modification times are kept; symbolic links are copied as links, never
// followed. A relative dst may not leave the checkout, also not through a
// symbolic link. Every regular file's size is verified after copying.
func (s *session) CopyIn(ctx context.Context, src, dst string) error {
	if s.isClosed() {
		return fmt.Errorf("copy %s into shell session %s: %w", src, s.id, ErrClosed)
	}
	to, name, closeTree, err := s.envTree(dst)
	if err != nil {
		return fmt.Errorf("copy %s into shell session %s: %w", src, s.id, err)
	}
	defer closeTree()
	if err := copyPath(ctx, hostTree{}, filepath.Clean(src), to, name); err != nil {
		return fmt.Errorf("copy %s into shell session %s at %s: %w", src, s.id, dst, err)
	}
	return nil
}

// CopyOut copies src, a path relative to the checkout (or absolute), to the
// host path dst, with the same rules as CopyIn: links stay links, modes and
// times are kept, a relative src may not leave the checkout, and every
// regular file's size is verified after copying.
func (s *session) CopyOut(ctx context.Context, src, dst string) error {
	if s.isClosed() {
		return fmt.Errorf("copy %s out of shell session %s: %w", src, s.id, ErrClosed)
	}
	from, name, closeTree, err := s.envTree(src)
	if err != nil {
		return fmt.Errorf("copy %s out of shell session %s: %w", src, s.id, err)
	}
	defer closeTree()
	if err := copyPath(ctx, from, name, hostTree{}, filepath.Clean(dst)); err != nil {
		return fmt.Errorf("copy %s out of shell session %s to %s: %w", src, s.id, dst, err)
	}
	return nil
}

// envTree resolves a path inside the environment: absolute paths are host
// paths; relative ones are confined to the checkout by an os.Root.
func (s *session) envTree(p string) (tree, string, func(), error) {
	if filepath.IsAbs(p) {
		return hostTree{}, filepath.Clean(p), func() {}, nil
	}
	if !filepath.IsLocal(p) && filepath.Clean(p) != "." {
		return nil, "", nil, fmt.Errorf("path %q leaves the workspace", p)
	}
	root, err := os.OpenRoot(s.workdir)
	if err != nil {
		return nil, "", nil, fmt.Errorf("open workspace: %w", err)
	}
	return rootTree{root}, filepath.Clean(p), func() { _ = root.Close() }, nil
}
