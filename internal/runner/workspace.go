package runner

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A workspace is made without `git clone` (which starts three processes,
// copies git's templates and writes a reflog): the .git directory gets
// the mirror's object files, hard-linked (copied where a link fails, as on
// another file system), HEAD naming the commit, and a config whose origin
// is the repository's URL without credential. `git read-tree --reset -u
// HEAD` then fills the index and the working tree, as clone's own checkout
// does.

// workspaceConfig is .git/config of a workspace; %s is the origin's URL.
const workspaceConfig = `[core]
	repositoryformatversion = 0
	filemode = true
	bare = false
	logallrefupdates = true
[remote "origin"]
	url = "%s"
	fetch = +refs/heads/*:refs/remotes/origin/*
`

// makeGitDir makes dest/.git a repository holding (with link) the objects
// of mirror, with HEAD detached at sha and origin url (which must hold no
// credential). dest must not exist or be empty.
func makeGitDir(mirror, dest, sha, url string, link bool) error {
	if strings.ContainsAny(url, "\n\"\\") {
		return fmt.Errorf("origin URL %q cannot go into a git config", url)
	}
	git := filepath.Join(dest, ".git")
	for _, d := range []string{filepath.Join(git, "refs"), filepath.Join(git, "objects")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if link {
		if err := linkTree(filepath.Join(mirror, "objects"), filepath.Join(git, "objects")); err != nil {
			return fmt.Errorf("link the mirror's objects: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(git, "config"), fmt.Appendf(nil, workspaceConfig, url), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(git, "HEAD"), []byte(sha+"\n"), 0o644)
}

// linkTree recreates the tree of object files under src in dst (which
// exists): each file hard-linked, or copied where the link fails; a
// directory is made only for the files it gets (objects/info is usually
// empty). A file dst has already is kept (object files never change: a
// second pass adds what a fetch brought). Git's temporary files, .keep
// files and objects/info/alternates are left out: a workspace needs
// nothing outside itself.
func linkTree(src, dst string) error {
	made := map[string]bool{dst: true}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := d.Name()
		if strings.HasPrefix(name, "tmp_") || strings.HasSuffix(name, ".lock") || strings.HasSuffix(name, ".keep") || rel == filepath.Join("info", "alternates") || !d.Type().IsRegular() {
			return nil
		}
		target := filepath.Join(dst, rel)
		if dir := filepath.Dir(target); !made[dir] {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			made[dir] = true
		}
		err = os.Link(p, target)
		if err == nil || errors.Is(err, fs.ErrExist) {
			return nil
		}
		err = copyFile(p, target)
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// hasObject reports whether repository dir holds object sha (hex), by the
// ref a fetch of it made, as a loose object, or in a pack's index (version
// 2). It never runs git; false may also mean it could not tell.
func hasObject(dir, sha string) bool {
	if _, err := os.Stat(filepath.Join(dir, "refs", "knotless", sha)); err == nil {
		return true
	}
	if _, err := os.Stat(filepath.Join(dir, "objects", sha[:2], sha[2:])); err == nil {
		return true
	}
	id, err := hex.DecodeString(sha)
	if err != nil {
		return false
	}
	idxs, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.idx"))
	for _, idx := range idxs {
		if ok, _ := packIndexHas(idx, id); ok {
			return true
		}
	}
	return false
}

// packIndexHas looks id up in a version 2 pack index: the fan-out table
// bounds a binary search of the sorted object names.
func packIndexHas(path string, id []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var head [8 + 256*4]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false, err
	}
	if !bytes.Equal(head[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
		return false, errors.New("not a version 2 pack index")
	}
	fanout := func(i int) int64 { return int64(binary.BigEndian.Uint32(head[8+4*i:])) }
	lo, hi := int64(0), fanout(int(id[0]))
	if id[0] > 0 {
		lo = fanout(int(id[0]) - 1)
	}
	name := make([]byte, len(id))
	for lo < hi {
		mid := (lo + hi) / 2
		if _, err := f.ReadAt(name, int64(len(head))+mid*int64(len(id))); err != nil {
			return false, err
		}
		switch c := bytes.Compare(name, id); {
		case c == 0:
			return true, nil
		case c < 0:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return false, nil
}
