package cache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// CopyTree copies src (a file, directory or symbolic link on this host) to
// dst, merging into an existing directory and replacing anything else in
// its way. Modes and modification times are kept; symbolic links are
// copied as links, never followed. Files are copied with copy_file_range
// (Go's io.Copy between files), which clones extents on file systems that
// can (btrfs, XFS with reflink) and copies in the kernel elsewhere: the
// copy shares nothing writable with src, so a step that changes a
// restored file never changes the cache entry.
func CopyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return copyEntry(src, dst, fi)
}

func copyEntry(src, dst string, fi fs.FileInfo) error {
	mode := fi.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := clearPath(dst, false); err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := clearPath(dst, true); err != nil {
			return err
		}
		if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := os.Chmod(dst, 0o700); err != nil {
			return err
		}
		des, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, de := range des {
			cfi, err := de.Info()
			if err != nil {
				return err
			}
			if err := copyEntry(filepath.Join(src, de.Name()), filepath.Join(dst, de.Name()), cfi); err != nil {
				return err
			}
		}
		if err := os.Chmod(dst, modeBits(mode)); err != nil {
			return err
		}
		return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
	case mode.IsRegular():
		if err := clearPath(dst, false); err != nil {
			return err
		}
		in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		if n != fi.Size() {
			return fmt.Errorf("copy %s: %d of %d bytes (did it change during the copy?)", src, n, fi.Size())
		}
		if err := os.Chmod(dst, modeBits(mode)); err != nil {
			return err
		}
		return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
	}
	return fmt.Errorf("%s: cannot copy a %s (only regular files, directories and symbolic links)", src, mode.Type())
}

// clearPath makes room at p: an existing directory stays when a directory
// is wanted; anything else there is removed.
func clearPath(p string, wantDir bool) error {
	cur, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.IsDir() {
		if wantDir {
			return nil
		}
		return fmt.Errorf("%s is a directory", p)
	}
	return os.Remove(p)
}

func modeBits(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// MoveTree moves src to dst (which must not exist) by one rename when both
// are on one file system, else copies it (CopyTree) and leaves src as it
// is. moved says which happened. Special files (devices, sockets, FIFOs)
// below src are not checked when renaming: callers that must refuse them
// copy instead.
func MoveTree(src, dst string) (moved bool, err error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return false, err
	}
	if err := os.Rename(src, dst); err == nil {
		return true, nil
	} else if !errors.Is(err, syscall.EXDEV) {
		return false, err
	}
	return false, CopyTree(src, dst)
}

// CheckBelow checks that p, a path below root (or root itself), reaches
// its place without a symbolic link: no directory between root and p's
// parent that exists is a link (the checkout is a repository's, and a
// repository may hold links pointing anywhere). p itself may be a link:
// CopyTree replaces it, MoveTree moves the link.
func CheckBelow(root, p string) error {
	rel, err := filepath.Rel(root, p)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return fmt.Errorf("%s is not below %s", p, root)
	}
	cur := root
	parts := strings.Split(rel, string(filepath.Separator))
	for _, part := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link: a cache path may not lead through one", cur)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", cur)
		}
	}
	return nil
}

// GiveTree makes uid:gid the owner of p (a restored file or tree below
// root) and of every directory between root and p that this process owns
// (CopyTree made them), so that an environment's non-root user can change
// what was restored. Links are not followed; root itself is left as it is.
// A process that is uid already does nothing.
func GiveTree(root, p string, uid, gid int) error {
	if os.Geteuid() == uid {
		return nil
	}
	err := filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(q, uid, gid)
	})
	if err != nil {
		return err
	}
	for d := filepath.Dir(p); d != root && strings.HasPrefix(d, root+string(filepath.Separator)); d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Geteuid() {
			if err := os.Lchown(d, uid, gid); err != nil {
				return err
			}
		}
	}
	return nil
}
