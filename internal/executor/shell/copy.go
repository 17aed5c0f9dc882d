package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// tree is one side of a copy: the host (plain paths) or the checkout seen
// through an os.Root, which refuses paths that leave it, also via symlinks.
// *os.Root implements it as is.
type tree interface {
	Lstat(name string) (fs.FileInfo, error)
	Open(name string) (*os.File, error)
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Mkdir(name string, perm fs.FileMode) error
	MkdirAll(name string, perm fs.FileMode) error
	Readlink(name string) (string, error)
	Symlink(oldname, newname string) error
	Chmod(name string, mode fs.FileMode) error
	Chtimes(name string, atime, mtime time.Time) error
	Remove(name string) error
}

type rootTree struct{ *os.Root }

type hostTree struct{}

func (hostTree) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }
func (hostTree) Open(name string) (*os.File, error)     { return os.Open(name) }
func (hostTree) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
func (hostTree) Mkdir(name string, perm fs.FileMode) error    { return os.Mkdir(name, perm) }
func (hostTree) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (hostTree) Readlink(name string) (string, error)         { return os.Readlink(name) }
func (hostTree) Symlink(oldname, newname string) error        { return os.Symlink(oldname, newname) }
func (hostTree) Chmod(name string, mode fs.FileMode) error    { return os.Chmod(name, mode) }
func (hostTree) Chtimes(name string, atime, mtime time.Time) error {
	return os.Chtimes(name, atime, mtime)
}
func (hostTree) Remove(name string) error { return os.Remove(name) }

// modeBits are the parts of a mode a copy keeps.
func modeBits(fi fs.FileInfo) fs.FileMode {
	return fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// copyPath copies src of from to dst of to, creating dst's parents (0755).
func copyPath(ctx context.Context, from tree, src string, to tree, dst string) error {
	fi, err := from.Lstat(src)
	if err != nil {
		return err
	}
	if parent := filepath.Dir(dst); parent != "." && parent != dst {
		if err := to.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("create parent directory: %w", err)
		}
	}
	return copyEntry(ctx, from, src, fi, to, dst)
}

func copyEntry(ctx context.Context, from tree, src string, fi fs.FileInfo, to tree, dst string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return copySymlink(from, src, to, dst)
	case fi.IsDir():
		return copyDir(ctx, from, src, fi, to, dst)
	case fi.Mode().IsRegular():
		return copyFile(ctx, from, src, to, dst)
	default:
		return fmt.Errorf("%s: cannot copy a %s (only regular files, directories and symbolic links)", src, fi.Mode().Type())
	}
}

// clearDst makes room for dst: nothing to do when it does not exist; an
// existing directory is kept when a directory is wanted and is an error
// otherwise; anything else is removed, so a copy never writes through a
// symbolic link that happens to sit at dst.
func clearDst(to tree, dst string, wantDir bool) (dirExists bool, err error) {
	cur, err := to.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if cur.IsDir() {
		if wantDir {
			return true, nil
		}
		return false, fmt.Errorf("%s is a directory", dst)
	}
	return false, to.Remove(dst)
}

func copyDir(ctx context.Context, from tree, src string, fi fs.FileInfo, to tree, dst string) error {
	exists, err := clearDst(to, dst, true)
	if err != nil {
		return err
	}
	if !exists {
		if err := to.Mkdir(dst, 0o700); err != nil {
			return err
		}
	}
	// Writable while we fill it; the source's mode is set at the end.
	if err := to.Chmod(dst, 0o700); err != nil {
		return err
	}
	d, err := from.Open(src)
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil {
		return fmt.Errorf("read directory %s: %w", src, err)
	}
	for _, ent := range entries {
		efi, err := ent.Info() // lstat: links stay links
		if err != nil {
			return err
		}
		if err := copyEntry(ctx, from, filepath.Join(src, ent.Name()), efi, to, filepath.Join(dst, ent.Name())); err != nil {
			return err
		}
	}
	if err := to.Chmod(dst, modeBits(fi)); err != nil {
		return err
	}
	return to.Chtimes(dst, fi.ModTime(), fi.ModTime())
}

func copySymlink(from tree, src string, to tree, dst string) error {
	target, err := from.Readlink(src)
	if err != nil {
		return err
	}
	if _, err := clearDst(to, dst, false); err != nil {
		return err
	}
	return to.Symlink(target, dst)
}

func copyFile(ctx context.Context, from tree, src string, to tree, dst string) (err error) {
	in, err := from.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s changed while being copied: no longer a regular file", src)
	}
	if _, err := clearDst(to, dst, false); err != nil {
		return err
	}
	out, err := to.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = to.Remove(dst)
		}
	}()
	n, err := io.Copy(out, ctxReader{ctx, in})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if n != st.Size() {
		return fmt.Errorf("%s: copied %d bytes but the file had %d (did it change during the copy?)", src, n, st.Size())
	}
	if err := to.Chmod(dst, modeBits(st)); err != nil {
		return err
	}
	if err := to.Chtimes(dst, st.ModTime(), st.ModTime()); err != nil {
		return err
	}
	got, err := to.Lstat(dst)
	if err != nil {
		return fmt.Errorf("verify %s: %w", dst, err)
	}
	if got.Size() != n {
		return fmt.Errorf("verify %s: it has %d bytes, %d were written", dst, got.Size(), n)
	}
	return nil
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
