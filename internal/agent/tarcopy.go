package agent

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The copy format is a tar stream (POSIX/PAX) of one file or directory
// tree: its first entry, named ".", is the source itself; the others are
// named "./REL" below it, parents before children. Regular files, directories
// and symbolic links only; modes (with setuid, setgid and sticky bits) and
// modification times are kept; symbolic links are copied as links, never
// followed. Both ends count the stream's bytes and SHA-256 and compare them
// (DataEnd against CopyDone), and every file's size is checked on unpacking,
// so a copy cut short is an error, never a silently truncated file.

// Tree is one side of a copy: a directory that confines every path (an
// *os.Root: paths may not leave it, also not through symbolic links), or
// the whole file system (HostTree).
type Tree interface {
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

// HostTree is the whole file system with plain paths.
type HostTree struct{}

func (HostTree) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }
func (HostTree) Open(name string) (*os.File, error)     { return os.Open(name) }
func (HostTree) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
func (HostTree) Mkdir(name string, perm fs.FileMode) error    { return os.Mkdir(name, perm) }
func (HostTree) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (HostTree) Readlink(name string) (string, error)         { return os.Readlink(name) }
func (HostTree) Symlink(oldname, newname string) error        { return os.Symlink(oldname, newname) }
func (HostTree) Chmod(name string, mode fs.FileMode) error    { return os.Chmod(name, mode) }
func (HostTree) Chtimes(name string, atime, mtime time.Time) error {
	return os.Chtimes(name, atime, mtime)
}
func (HostTree) Remove(name string) error { return os.Remove(name) }

// ResolveIn picks the tree for a path inside an environment: absolute paths
// are plain paths; relative ones are confined to workdir by an os.Root,
// and refused when a directory on the way is a symbolic link leaving it
// (confined). close releases the root.
func ResolveIn(workdir, p string) (t Tree, name string, close func(), err error) {
	if filepath.IsAbs(p) {
		return HostTree{}, filepath.Clean(p), func() {}, nil
	}
	if !filepath.IsLocal(p) && filepath.Clean(p) != "." {
		return nil, "", nil, fmt.Errorf("path %q leaves the workspace", p)
	}
	root, err := os.OpenRoot(workdir)
	if err != nil {
		return nil, "", nil, fmt.Errorf("open workspace: %w", err)
	}
	name = filepath.Clean(p)
	if err := confined(root, name); err != nil {
		_ = root.Close()
		return nil, "", nil, err
	}
	return root, name, func() { _ = root.Close() }, nil
}

// maxLinks bounds the symbolic links confined follows (Linux's limit).
const maxLinks = 40

// confined resolves the directories on the way to name (all but its last
// element) inside root, one at a time by Lstat and Readlink, and returns
// an error when a symbolic link among them leads out of root (an absolute
// target, or one climbing above it) or there are more than maxLinks. What
// does not exist is left to the operation that follows. os.Root refuses
// such paths itself on Linux, but it relies on openat(O_NOFOLLOW |
// O_DIRECTORY) failing on a symbolic link, and gVisor's runsc follows the
// link there instead: in a job pod of RuntimeClass gvisor, os.Root alone
// would let `escape/etc/passwd` (escape -> /) through. Every path confined
// hands to root has real directories only before its last element.
func confined(root *os.Root, name string) error {
	var resolved []string
	pending := strings.Split(filepath.ToSlash(name), "/")
	links := 0
	for len(pending) > 1 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(resolved) == 0 {
				return fmt.Errorf("path %q leaves the workspace", name)
			}
			resolved = resolved[:len(resolved)-1]
			continue
		}
		cur := filepath.Join(append(slices.Clone(resolved), c)...)
		fi, err := root.Lstat(cur)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			resolved = append(resolved, c)
			continue
		}
		if links++; links > maxLinks {
			return fmt.Errorf("path %q: too many levels of symbolic links", name)
		}
		target, err := root.Readlink(cur)
		if err != nil {
			return err
		}
		if path.IsAbs(target) {
			return fmt.Errorf("path %q escapes from the workspace through the symbolic link %s -> %s", name, cur, target)
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	return nil
}

func modeBits(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// WriteTar writes src of t as a copy-format tar stream to w.
func WriteTar(ctx context.Context, w io.Writer, t Tree, src string) error {
	fi, err := t.Lstat(src)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := writeEntry(ctx, tw, t, src, ".", fi); err != nil {
		return err
	}
	return tw.Close()
}

func writeEntry(ctx context.Context, tw *tar.Writer, t Tree, p, name string, fi fs.FileInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	hdr := &tar.Header{Name: name, ModTime: fi.ModTime(), Format: tar.FormatPAX}
	hdr.Mode = int64(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := t.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	case fi.IsDir():
		hdr.Typeflag = tar.TypeDir
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		d, err := t.Open(p)
		if err != nil {
			return err
		}
		entries, err := d.ReadDir(-1)
		_ = d.Close()
		if err != nil {
			return fmt.Errorf("read directory %s: %w", p, err)
		}
		slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range entries {
			efi, err := e.Info() // lstat: links stay links
			if err != nil {
				return err
			}
			if err := writeEntry(ctx, tw, t, filepath.Join(p, e.Name()), name+"/"+e.Name(), efi); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		f, err := t.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s changed while being copied: no longer a regular file", p)
		}
		hdr.Typeflag, hdr.Size, hdr.ModTime = tar.TypeReg, st.Size(), st.ModTime()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(tw, io.LimitReader(ctxReader{ctx, f}, st.Size()))
		if err != nil {
			return fmt.Errorf("copy %s: %w", p, err)
		}
		if n != st.Size() {
			return fmt.Errorf("%s: read %d bytes but the file had %d (did it change during the copy?)", p, n, st.Size())
		}
		return nil
	}
	return fmt.Errorf("%s: cannot copy a %s (only regular files, directories and symbolic links)", p, fi.Mode().Type())
}

// ExtractTar unpacks a copy-format tar stream from r to dst of t: the
// stream's "." becomes dst, created with its parents (0755) when missing.
// A directory is merged into an existing directory; anything else at a
// path is replaced (a copy never writes through a symbolic link found
// there). An entry below a symbolic link, one the stream made or one found
// below dst, is refused (belowLink): a crafted stream (`./l -> /outside`
// then `./l/x`) never writes outside dst. It returns how many entries it
// unpacked.
func ExtractTar(ctx context.Context, r io.Reader, t Tree, dst string) (int, error) {
	dst = filepath.Clean(dst)
	if parent := filepath.Dir(dst); parent != "." && parent != dst {
		if err := t.MkdirAll(parent, 0o755); err != nil {
			return 0, fmt.Errorf("create parent directory: %w", err)
		}
	}
	type dirMode struct {
		path  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirMode
	real := realDirs{dst: true}
	tr := tar.NewReader(r)
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("read copy stream: %w", err)
		}
		rel, err := entryPath(hdr.Name)
		if err != nil {
			return n, err
		}
		p := dst
		if rel != "" {
			p = filepath.Join(dst, filepath.FromSlash(rel))
			if err := real.belowLink(t, dst, p); err != nil {
				return n, fmt.Errorf("copy stream entry %q: %w", hdr.Name, err)
			}
		}
		mode := headerMode(hdr)
		switch hdr.Typeflag {
		case tar.TypeDir:
			exists, err := clearDst(t, p, true)
			if err != nil {
				return n, err
			}
			if !exists {
				if err := t.Mkdir(p, 0o700); err != nil {
					return n, err
				}
			}
			real[p] = true
			// Writable while we fill it; its own mode is set at the end.
			if err := chmodDir(t, p, 0o700); err != nil {
				// A directory that exists and is not ours (a volume's
				// mount point owned by root, mode 0777) is merged into as
				// it is: its mode and times stay.
				if exists && errors.Is(err, fs.ErrPermission) {
					n++
					continue
				}
				return n, err
			}
			dirs = append(dirs, dirMode{p, mode, hdr.ModTime})
		case tar.TypeSymlink:
			if _, err := clearDst(t, p, false); err != nil {
				return n, err
			}
			if err := t.Symlink(hdr.Linkname, p); err != nil {
				return n, err
			}
			real.forget(p)
		case tar.TypeReg:
			if err := extractFile(ctx, tr, t, p, hdr, mode); err != nil {
				return n, err
			}
		default:
			return n, fmt.Errorf("copy stream entry %q: type %q is not a file, directory or symbolic link", hdr.Name, hdr.Typeflag)
		}
		n++
	}
	if n == 0 {
		return 0, errors.New("copy stream is empty")
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := chmodDir(t, d.path, d.mode); err != nil {
			return n, err
		}
		if err := t.Chtimes(d.path, d.mtime, d.mtime); err != nil {
			return n, err
		}
	}
	return n, nil
}

// headerMode is hdr's permission bits with setuid, setgid and sticky.
func headerMode(hdr *tar.Header) fs.FileMode {
	mode := fs.FileMode(hdr.Mode).Perm()
	if hdr.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// realDirs are the directories below dst that ExtractTar made or found to
// be directories (not symbolic links), so that an entry's parents are
// looked at once: a stream lists a directory before what it holds, so a
// well-formed stream costs no lookup.
type realDirs map[string]bool

// belowLink returns an error when a parent of p (below dst) is not a
// directory: a symbolic link (the stream's own or one found there) or
// anything else; a missing parent is Lstat's error.
func (r realDirs) belowLink(t Tree, dst, p string) error {
	var chain []string
	for d := filepath.Dir(p); !r[d] && len(d) > len(dst); d = filepath.Dir(d) {
		chain = append(chain, d)
	}
	for i := len(chain) - 1; i >= 0; i-- {
		fi, err := t.Lstat(chain[i])
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("below %s, which is not a directory (%s): refused, it could lead outside the copy", chain[i], fi.Mode().Type())
		}
		r[chain[i]] = true
	}
	return nil
}

// forget drops p, which became a symbolic link. Nothing below it is
// known: clearDst never replaces a directory with a link, so p was none.
func (r realDirs) forget(p string) { delete(r, p) }

// chmodDir sets the mode of the directory p of t through a descriptor of
// it (fchmod), never by path: os.Root.Chmod calls fchmodat2 (Linux 6.6),
// which a seccomp filter written before it refuses with EPERM where runc
// answers ENOSYS (and Go falls back to the old call): gVisor applying a
// pod's RuntimeDefault profile does, and every copy into a job pod of
// RuntimeClass gvisor failed "chmodat: operation not permitted". A
// descriptor also leaves no gap between the check and the change.
func chmodDir(t Tree, p string, mode fs.FileMode) error {
	d, err := t.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Chmod(mode)
}

// entryPath checks a tar entry's name: "." or "./REL" with REL a local
// path; it returns REL ("" for ".").
func entryPath(name string) (string, error) {
	if name == "." {
		return "", nil
	}
	rel, ok := strings.CutPrefix(name, "./")
	if !ok || rel == "" || path.Clean(rel) != rel || !filepath.IsLocal(filepath.FromSlash(rel)) {
		return "", fmt.Errorf("copy stream entry %q: not a path below the copied tree", name)
	}
	return rel, nil
}

func extractFile(ctx context.Context, tr *tar.Reader, t Tree, p string, hdr *tar.Header, mode fs.FileMode) (err error) {
	// Created exclusively: only when something is in the way (a copy
	// merged into an existing tree) is it looked at and removed first. A
	// path lookup in a job pod's file system costs (every call through an
	// os.Root walks the path one openat at a time; gVisor makes each
	// dear), so a file costs one path walk, its creation; its mode, size
	// check and times go through the descriptor.
	const create = os.O_WRONLY | os.O_CREATE | os.O_EXCL | syscall.O_NOFOLLOW
	f, err := t.OpenFile(p, create, 0o600)
	if errors.Is(err, fs.ErrExist) {
		if _, err := clearDst(t, p, false); err != nil {
			return err
		}
		f, err = t.OpenFile(p, create, 0o600)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = t.Remove(p)
		}
	}()
	n, err := io.Copy(f, ctxReader{ctx, tr})
	if err == nil && n == hdr.Size {
		err = f.Chmod(mode) // through the descriptor: see chmodDir
	}
	var got fs.FileInfo
	byPath := false
	if err == nil && n == hdr.Size {
		got, err = f.Stat() // what the file system holds, through the descriptor
	}
	if err == nil && n == hdr.Size {
		if err = setTimes(f, hdr.ModTime); errors.Is(err, errors.ErrUnsupported) {
			byPath, err = true, nil
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("write %s: got %d of %d bytes", p, n, hdr.Size)
	}
	if got.Size() != hdr.Size {
		return fmt.Errorf("verify %s: it has %d bytes, %d were written", p, got.Size(), hdr.Size)
	}
	if byPath {
		return t.Chtimes(p, hdr.ModTime, hdr.ModTime)
	}
	return nil
}

// clearDst makes room at p: nothing to do when it does not exist; an
// existing directory is kept when a directory is wanted and is an error
// otherwise; anything else is removed.
func clearDst(t Tree, p string, wantDir bool) (dirExists bool, err error) {
	cur, err := t.Lstat(p)
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
		return false, fmt.Errorf("%s is a directory", p)
	}
	return false, t.Remove(p)
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
