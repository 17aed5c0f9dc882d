package agent

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// ExtractMembers unpacks some top-level members of a copy-format tar
// stream (WriteTar's: ".", then "./NAME" and "./NAME/REL" below it) from
// r: members maps NAME to an absolute path, where that member is
// unpacked as ExtractTar unpacks a whole stream (a directory merged into
// one already there, anything else replaced). Entries of members not
// listed, and the root ".", are read past. It returns how many entries it
// unpacked and the names of the members it found (sorted).
//
// Every entry's name is checked as ExtractTar checks it; a member that is
// a directory is unpacked inside an *os.Root opened at its path, so
// nothing it holds can name a path outside it; an entry below a symbolic
// link the stream made (which WriteTar never writes: a link is a leaf) is
// refused, also where os.Root would follow the link (gVisor: see
// confined). A stream whose member is cut in two by another, or whose
// member's first entry is not the member itself, is refused.
//
// What it made (files, directories, links, and the members' parents it
// created) is added to made, in order, for Undo after a failure.
func ExtractMembers(ctx context.Context, r io.Reader, members map[string]string, made *Made) (int, []string, error) {
	for name, dst := range members {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\") {
			return 0, nil, fmt.Errorf("member %q: not a top-level name", name)
		}
		if !filepath.IsAbs(dst) || filepath.Clean(dst) != dst || dst == "/" {
			return 0, nil, fmt.Errorf("member %q: destination %q is not a clean absolute path", name, dst)
		}
	}
	tr := tar.NewReader(r)
	var cur *memberSink
	var found []string
	files := 0
	finish := func() error {
		if cur == nil {
			return nil
		}
		n, err := cur.finish()
		files += n
		cur = nil
		return err
	}
	fail := func(err error) (int, []string, error) {
		if cur != nil {
			n, _ := cur.abort(err)
			files += n
		}
		sort.Strings(found)
		return files, found, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("read the archive: %w", err))
		}
		rel, err := entryPath(hdr.Name)
		if err != nil {
			return fail(err)
		}
		if rel == "" {
			continue // the root
		}
		top, below, _ := strings.Cut(rel, "/")
		if cur != nil && cur.name != top {
			if err := finish(); err != nil {
				return fail(err)
			}
		}
		dst, ok := members[top]
		if !ok {
			continue
		}
		if cur == nil {
			switch {
			case slices.Contains(found, top):
				return fail(fmt.Errorf("archive entry %q: member %q comes again after another member", hdr.Name, top))
			case below != "":
				return fail(fmt.Errorf("archive entry %q comes before its member %q itself", hdr.Name, top))
			}
			found = append(found, top)
			if cur, err = startMember(ctx, top, dst, hdr.Typeflag == tar.TypeDir, made); err != nil {
				return fail(err)
			}
		}
		if err := cur.write(hdr, below, tr); err != nil {
			return fail(err)
		}
	}
	if err := finish(); err != nil {
		return fail(err)
	}
	sort.Strings(found)
	return files, found, nil
}

// memberSink unpacks one member: its entries, renamed below "." and
// written to a tar stream that ExtractTar reads in a goroutine.
type memberSink struct {
	name  string
	pw    *io.PipeWriter
	tw    *tar.Writer
	links []string // symbolic links the member made, as "" or "REL"
	done  chan extractResult
	res   *extractResult
	close func()
}

type extractResult struct {
	n   int
	err error
}

// errUnpacked closes a member's pipe once its unpacking returned.
var errUnpacked = errors.New("the member's unpacking ended")

// startMember prepares dst for member name (isDir: its first entry is a
// directory) and starts unpacking into it.
func startMember(ctx context.Context, name, dst string, isDir bool, made *Made) (*memberSink, error) {
	if err := made.mkdirParents(filepath.Dir(dst)); err != nil {
		return nil, fmt.Errorf("member %q: create the parents of %s: %w", name, dst, err)
	}
	var tree Tree = recorder{Tree: HostTree{}, made: made}
	target, closeTree := dst, func() {}
	if isDir {
		fi, err := os.Lstat(dst)
		if err == nil && !fi.IsDir() {
			if err = os.Remove(dst); err == nil {
				err = fs.ErrNotExist
			}
		}
		if errors.Is(err, fs.ErrNotExist) {
			if err = os.Mkdir(dst, 0o700); err == nil {
				made.add(dst)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("member %q: make %s: %w", name, dst, err)
		}
		root, err := os.OpenRoot(dst)
		if err != nil {
			return nil, fmt.Errorf("member %q: %w", name, err)
		}
		tree, target, closeTree = recorder{Tree: root, base: dst, made: made}, ".", func() { _ = root.Close() }
	}
	pr, pw := io.Pipe()
	m := &memberSink{name: name, pw: pw, tw: tar.NewWriter(pw), done: make(chan extractResult, 1), close: closeTree}
	go func() {
		n, err := ExtractTar(ctx, pr, tree, target)
		pr.CloseWithError(cmp.Or(err, errUnpacked)) // unblock the writer
		m.done <- extractResult{n, err}
	}()
	return m, nil
}

// write passes one entry of the member (below: its path below the
// member, "" for the member itself) and its content on.
func (m *memberSink) write(hdr *tar.Header, below string, r io.Reader) error {
	for _, l := range m.links {
		if l == "" || strings.HasPrefix(below, l+"/") {
			return fmt.Errorf("archive entry %q: below the symbolic link %q the archive made", hdr.Name, path.Join(".", m.name, l))
		}
	}
	h := *hdr
	h.Name = "."
	if below != "" {
		h.Name = "./" + below
	}
	if hdr.Typeflag == tar.TypeSymlink {
		m.links = append(m.links, below)
	}
	err := m.tw.WriteHeader(&h)
	if err == nil && hdr.Typeflag == tar.TypeReg {
		_, err = io.Copy(m.tw, r)
	}
	if err != nil {
		// The unpacking stopped (its error closed the pipe), or the
		// archive could not be read: either way this member is over.
		if _, uerr := m.abort(err); uerr != nil {
			return uerr
		}
		return fmt.Errorf("member %q: %w", m.name, err)
	}
	return nil
}

// result waits for the unpacking once.
func (m *memberSink) result() extractResult {
	if m.res == nil {
		r := <-m.done
		m.res = &r
		m.close()
	}
	return *m.res
}

// abort cuts the member's stream with err and returns what its
// unpacking did, with the unpacking's own error (nil when err alone
// stopped it).
func (m *memberSink) abort(err error) (int, error) {
	m.pw.CloseWithError(err)
	r := m.result()
	if r.err == nil || errors.Is(r.err, err) {
		return r.n, nil
	}
	return r.n, fmt.Errorf("member %q: %w", m.name, r.err)
}

// finish ends the member's stream and waits for its unpacking.
func (m *memberSink) finish() (int, error) {
	if err := m.tw.Close(); err != nil {
		n, uerr := m.abort(err)
		return n, cmp.Or(uerr, fmt.Errorf("member %q: %w", m.name, err))
	}
	m.pw.Close()
	r := m.result()
	if r.err != nil {
		return r.n, fmt.Errorf("member %q: %w", m.name, r.err)
	}
	return r.n, nil
}

// Made is what an unpacking made, in order: absolute paths of files,
// directories and links that were not there before.
type Made struct {
	paths []string
}

func (m *Made) add(p string) {
	if m != nil {
		m.paths = append(m.paths, p)
	}
}

// mkdirParents makes dir and its missing parents (0755), recording the
// topmost one it made.
func (m *Made) mkdirParents(dir string) error {
	top := ""
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		top = d
	}
	if top == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	m.add(top)
	return nil
}

// Undo removes what was made, newest first (a directory with all it
// holds, also when read-only), and says what it could not remove.
func (m *Made) Undo() error {
	if m == nil {
		return nil
	}
	var errs []error
	for i := len(m.paths) - 1; i >= 0; i-- {
		p := m.paths[i]
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, err)
		case fi.IsDir():
			errs = append(errs, removeTree(p))
		default:
			errs = append(errs, removeFile(p))
		}
	}
	m.paths = nil
	return errors.Join(errs...)
}

// removeFile removes p, also from a directory the unpacking made
// read-only (its mode is given back).
func removeFile(p string) error {
	err := os.Remove(p)
	if errors.Is(err, fs.ErrPermission) {
		dir := filepath.Dir(p)
		if fi, serr := os.Stat(dir); serr == nil && os.Chmod(dir, fi.Mode().Perm()|0o700) == nil {
			err = os.Remove(p)
			_ = os.Chmod(dir, fi.Mode().Perm())
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// removeTree removes the directory p and all it holds, making read-only
// directories writable first.
func removeTree(p string) error {
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// recorder is a Tree that adds what it creates to made: paths are base
// joined with the names it is given (base "" for HostTree's absolute
// names).
type recorder struct {
	Tree
	base string
	made *Made
}

func (r recorder) abs(name string) string {
	if r.base == "" {
		return name
	}
	return filepath.Join(r.base, name)
}

func (r recorder) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := r.Tree.OpenFile(name, flag, perm)
	if err == nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0 {
		r.made.add(r.abs(name))
	}
	return f, err
}

func (r recorder) Mkdir(name string, perm fs.FileMode) error {
	err := r.Tree.Mkdir(name, perm)
	if err == nil {
		r.made.add(r.abs(name))
	}
	return err
}

func (r recorder) Symlink(oldname, newname string) error {
	err := r.Tree.Symlink(oldname, newname)
	if err == nil {
		r.made.add(r.abs(newname))
	}
	return err
}
