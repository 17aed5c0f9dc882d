package outputs

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

	"knotless.dev/knotless/internal/api"
)

// Clean normalizes one `outputs:` path: slash-separated, no trailing slash,
// "." for the checkout itself. It fails for a path that is absolute or
// leaves the checkout (the workflow parser refuses those already).
func Clean(p string) (string, error) {
	c := path.Clean(strings.ReplaceAll(p, "\\", "/"))
	if c == "." {
		return c, nil
	}
	if path.IsAbs(c) || !filepath.IsLocal(filepath.FromSlash(c)) {
		return "", fmt.Errorf("output %q is not a path inside the checkout", p)
	}
	return c, nil
}

// Roots returns paths cleaned (Clean), without duplicates and without any
// path below another one, in byte order: the trees an archive holds.
func Roots(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		c, err := Clean(p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	var roots []string
	for _, p := range out {
		if !slices.ContainsFunc(roots, func(r string) bool { return below(p, r) }) {
			roots = append(roots, p)
		}
	}
	return roots, nil
}

// below reports whether p is r or inside r.
func below(p, r string) bool {
	return r == "." || p == r || strings.HasPrefix(p, r+"/")
}

// Stats counts what an archive holds.
type Stats struct {
	Entries int   // files, directories and symbolic links
	Bytes   int64 // total size of the regular files
}

// Pack writes the archive of the trees root/<p> for each p of roots (as
// Roots returns them) to w and returns what it holds, counted per root in
// perRoot (by root). Paths that do not exist are the caller's to leave
// out; a file of another type (a socket, a device) is an error.
func Pack(ctx context.Context, w io.Writer, root string, roots []string) (total Stats, perRoot map[string]Stats, err error) {
	tw := tar.NewWriter(w)
	perRoot = map[string]Stats{}
	for _, r := range roots {
		var st Stats
		err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(r)), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			name := filepath.ToSlash(rel)
			n, err := packEntry(tw, p, name, d)
			if err != nil {
				return err
			}
			st.Entries++
			st.Bytes += n
			return nil
		})
		if err != nil {
			return total, perRoot, fmt.Errorf("pack %s: %w", r, err)
		}
		perRoot[r] = st
		total.Entries += st.Entries
		total.Bytes += st.Bytes
	}
	if err := tw.Close(); err != nil {
		return total, perRoot, fmt.Errorf("pack outputs: %w", err)
	}
	return total, perRoot, nil
}

// packEntry writes one entry and returns the bytes of a regular file.
func packEntry(tw *tar.Writer, p, name string, d fs.DirEntry) (int64, error) {
	fi, err := d.Info() // lstat: links stay links
	if err != nil {
		return 0, err
	}
	hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime().Truncate(time.Second)}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return 0, err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return 0, tw.WriteHeader(hdr)
	case fi.IsDir():
		if name != "." {
			hdr.Name += "/"
		} else {
			hdr.Name = "./"
		}
		hdr.Typeflag = tar.TypeDir
		return 0, tw.WriteHeader(hdr)
	case fi.Mode().IsRegular():
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return 0, err
		}
		n, err := io.Copy(tw, io.LimitReader(f, st.Size()))
		if err != nil {
			return n, fmt.Errorf("copy %s: %w", name, err)
		}
		if n != st.Size() {
			return n, fmt.Errorf("%s: read %d bytes but the file had %d (did it change?)", name, n, st.Size())
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s: cannot store a %s (only regular files, directories and symbolic links)", name, fi.Mode().Type())
}

// entryName checks an archive entry's name and returns it cleaned, without
// the trailing slash of a directory ("." for the checkout itself).
func entryName(name string) (string, error) {
	n := strings.TrimSuffix(name, "/")
	if n == "." {
		return n, nil
	}
	if n == "" || path.Clean(n) != n || path.IsAbs(n) || !filepath.IsLocal(filepath.FromSlash(n)) || strings.Contains(n, "\\") {
		return "", fmt.Errorf("archive entry %q is not a clean relative path", name)
	}
	return n, nil
}

// Scan reads an archive and lists its entries in archive order, checking
// each name (a clean relative path that stays inside the checkout, given
// once), type and size. A truncated archive is an error.
func Scan(r io.Reader) ([]api.OutputEntry, Stats, error) {
	var out []api.OutputEntry
	var st Stats
	seen := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, st, fmt.Errorf("read outputs archive: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return nil, st, err
		}
		if seen[name] {
			return nil, st, fmt.Errorf("outputs archive entry %s appears twice", name)
		}
		seen[name] = true
		e := api.OutputEntry{Path: name, Mode: uint32(hdr.Mode) & 0o777}
		switch hdr.Typeflag {
		case tar.TypeReg:
			e.Kind, e.Size = api.OutputFile, hdr.Size
			n, err := io.Copy(io.Discard, tr)
			if err != nil {
				return nil, st, fmt.Errorf("read outputs archive entry %s: %w", name, err)
			}
			if n != hdr.Size {
				return nil, st, fmt.Errorf("outputs archive entry %s: %d of %d bytes", name, n, hdr.Size)
			}
			st.Bytes += n
		case tar.TypeDir:
			e.Kind = api.OutputDir
		case tar.TypeSymlink:
			e.Kind, e.Target = api.OutputSymlink, hdr.Linkname
		default:
			return nil, st, fmt.Errorf("outputs archive entry %s: type %q is not a file, directory or symbolic link", name, hdr.Typeflag)
		}
		st.Entries++
		out = append(out, e)
	}
	return out, st, nil
}

// SafeLink reports whether a symbolic link at name (an entry's path) to
// target stays inside the directory it is unpacked to.
func SafeLink(name, target string) bool {
	if target == "" || path.IsAbs(target) || strings.Contains(target, "\\") {
		return false
	}
	return filepath.IsLocal(filepath.FromSlash(path.Join(path.Dir(name), target)))
}

// Unpack extracts an archive into the directory dst, which must exist.
// Every path is confined to dst (an os.Root: no entry, and no link
// followed, leads outside it); an existing file is never overwritten (an
// error names it); a symbolic link whose target is absolute or leaves dst
// is refused. It returns what it unpacked. On error, what was unpacked so
// far stays.
func Unpack(ctx context.Context, r io.Reader, dst string) (Stats, error) {
	var st Stats
	root, err := os.OpenRoot(dst)
	if err != nil {
		return st, err
	}
	defer root.Close()
	type dirTime struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirTime
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("read outputs archive: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return st, err
		}
		local := filepath.FromSlash(name)
		mode := fs.FileMode(hdr.Mode).Perm()
		if parent := filepath.Dir(local); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return st, fmt.Errorf("create directory %s: %w", parent, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := root.Mkdir(local, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
					return st, fmt.Errorf("create directory %s: %w", name, err)
				}
				if fi, err := root.Lstat(local); err != nil || !fi.IsDir() {
					return st, fmt.Errorf("%s exists and is not a directory: not overwritten", name)
				}
			}
			dirs = append(dirs, dirTime{local, mode, hdr.ModTime})
		case tar.TypeSymlink:
			if !SafeLink(name, hdr.Linkname) {
				return st, fmt.Errorf("%s: a symbolic link to %q, which leaves the directory: refused", name, hdr.Linkname)
			}
			if err := root.Symlink(hdr.Linkname, local); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return st, fmt.Errorf("%s exists already: not overwritten", name)
				}
				return st, err
			}
		case tar.TypeReg:
			if err := unpackFile(ctx, root, tr, local, hdr, mode); err != nil {
				return st, err
			}
			st.Bytes += hdr.Size
		default:
			return st, fmt.Errorf("outputs archive entry %s: type %q is not a file, directory or symbolic link", name, hdr.Typeflag)
		}
		st.Entries++
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := root.Chmod(d.name, d.mode|0o700); err != nil {
			return st, err
		}
		_ = root.Chtimes(d.name, d.mtime, d.mtime)
	}
	return st, nil
}

func unpackFile(ctx context.Context, root *os.Root, tr *tar.Reader, name string, hdr *tar.Header, mode fs.FileMode) (err error) {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists already: not overwritten", filepath.ToSlash(name))
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = root.Remove(name)
		}
	}()
	n, err := io.Copy(f, ctxReader{ctx, tr})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.ToSlash(name), err)
	}
	if n != hdr.Size {
		return fmt.Errorf("write %s: got %d of %d bytes", filepath.ToSlash(name), n, hdr.Size)
	}
	if err := root.Chmod(name, mode); err != nil {
		return err
	}
	return root.Chtimes(name, hdr.ModTime, hdr.ModTime)
}

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
