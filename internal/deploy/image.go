package deploy

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// RunnerUID is the user (and group) the runner pod runs as, in the
// manifests and in the runner image: a numeric non-root ID, as Pod
// Security "restricted" verifies (65532 is distroless's "nonroot").
const RunnerUID = 65532

// File is one entry of an image's layer. Exactly one of Source, Data,
// Link is used; a directory has fs.ModeDir in Mode.
type File struct {
	Path     string      // absolute path inside the image
	Mode     fs.FileMode // permission bits, plus fs.ModeDir or fs.ModeSymlink
	Source   string      // host file whose content is copied
	Data     []byte      // literal content
	Link     string      // symlink target
	UID, GID int
}

// Image is a one-layer image made of Files; no registry is involved.
type Image struct {
	Ref        string // e.g. "localhost/knotless/runner:dev"; never :latest
	Arch       string // GOARCH of its programs; default runtime.GOARCH (BaseFiles are this machine's)
	Files      []File
	User       string // "UID:GID"
	Entrypoint []string
	Env        []string
}

// BaseFiles are the files of a small image fit to run knotless-run from
// this machine's own programs: busybox (sh, sha256sum) and curl (what
// the manifests' init container uses), git with git-remote-http (the
// runner fetches with git) and every shared library they load (found with ldd),
// the CA certificates, /etc/passwd with root and knotless (RunnerUID),
// /tmp 1777. It needs Debian's busybox-static, git and ca-certificates.
func BaseFiles() ([]File, error) {
	files, err := busyboxFiles()
	if err != nil {
		return nil, err
	}
	uid := fmt.Sprint(RunnerUID)
	files = append(files, []File{
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/usr/share/git-core/templates", Mode: fs.ModeDir | 0o755}, // git init warns without it
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nknotless:x:" + uid + ":" + uid + ":knotless:/tmp:/bin/sh\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nknotless:x:" + uid + ":\n")},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Source: "/etc/ssl/certs/ca-certificates.crt"},
	}...)
	// curl: Debian's static busybox wget crashes in a pod (static glibc
	// and NSS), so the init container prefers curl where there is one.
	bins := map[string]string{"/usr/bin/git": "/usr/bin/git", "/usr/lib/git-core/git-remote-http": "/usr/lib/git-core/git-remote-http", "/usr/bin/curl": "/usr/bin/curl"}
	libs := map[string]bool{}
	for dst, src := range bins {
		files = append(files, File{Path: dst, Mode: 0o755, Source: src})
		out, err := exec.Command("ldd", src).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s (is git installed?): %w", src, err)
		}
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
		// "/lib64/ld-linux-x86-64.so.2 (0x...)": each absolute path is a
		// library to copy, at the path the program asks for.
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				libs[f] = true
			}
		}
	}
	files = append(files, File{Path: "/usr/lib/git-core/git-remote-https", Mode: fs.ModeSymlink | 0o777, Link: "git-remote-http"})
	for lib := range libs {
		files = append(files, File{Path: lib, Mode: 0o755, Source: lib})
	}
	return files, nil
}

// busyboxFiles are this machine's /bin/busybox (Debian's busybox-static)
// and a symbolic link to it for each applet, where `busybox --list-full`
// puts it.
func busyboxFiles() ([]File, error) {
	const bb = "/bin/busybox"
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets (is busybox-static installed?): %w", err)
	}
	files := []File{{Path: bb, Mode: 0o755, Source: bb}}
	for _, applet := range strings.Fields(string(out)) {
		if p := "/" + strings.TrimPrefix(applet, "/"); p != bb {
			files = append(files, File{Path: p, Mode: fs.ModeSymlink | 0o777, Link: bb})
		}
	}
	return files, nil
}

// RunnerImage is BaseFiles plus, in /usr/local/bin under their release
// names (FileName), knotless-run for linux/arch and the step agent for
// every one of Arches, as the manifests' init container takes them with
// KNOTLESS_DOWNLOAD_URL empty; knotless-run and knotless-agent there link
// to arch's own. It runs knotless-run as RunnerUID. files are by file
// name, as Build returns them. One image per architecture: its busybox,
// git and curl are this machine's, so arch must be this machine's
// (runtime.GOARCH). Errors: another arch, a file missing.
func RunnerImage(ref, arch string, files map[string]string) (Image, error) {
	if arch != runtime.GOARCH {
		return Image{}, fmt.Errorf("runner image for linux/%s: its busybox, git and curl are this machine's (linux/%s): build it on a linux/%s machine", arch, runtime.GOARCH, arch)
	}
	base, err := BaseFiles()
	if err != nil {
		return Image{}, err
	}
	names := []string{FileName("knotless-run", arch)}
	for _, a := range Arches {
		names = append(names, FileName("knotless-agent", a))
	}
	for _, n := range names {
		src, ok := files[n]
		if !ok {
			return Image{}, fmt.Errorf("runner image: no %s", n)
		}
		base = append(base, File{Path: "/usr/local/bin/" + n, Mode: 0o755, Source: src})
	}
	for _, p := range Programs {
		base = append(base, File{Path: "/usr/local/bin/" + p, Mode: fs.ModeSymlink | 0o777, Link: FileName(p, arch)})
	}
	uid := fmt.Sprint(RunnerUID)
	return Image{Ref: ref, Arch: arch, Files: base, User: uid + ":" + uid, Entrypoint: []string{"/usr/local/bin/knotless-run"},
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"}}, nil
}

// WriteArchive writes img as a docker image archive (what `docker load`
// and `ctr images import` read) to path. Errors: a ref without a tag or
// with :latest (a kubelet would try to pull it), unreadable sources.
func WriteArchive(path string, img Image) error {
	if strings.HasSuffix(img.Ref, ":latest") || !strings.Contains(pathBase(img.Ref), ":") {
		return fmt.Errorf("image %q: give a tag other than latest, or the kubelet will try to pull it", img.Ref)
	}
	tag, err := name.NewTag(img.Ref)
	if err != nil {
		return fmt.Errorf("image %q: %w", img.Ref, err)
	}
	layerTar, err := layer(img.Files)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		return err
	}
	v1img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	cf, err := v1img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", img.Arch
	if cf.Architecture == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config = v1.Config{User: img.User, Entrypoint: img.Entrypoint, Env: img.Env, WorkingDir: "/tmp"}
	if v1img, err = mutate.ConfigFile(v1img, cf); err != nil {
		return err
	}
	if err := tarball.WriteToFile(path, tag, v1img); err != nil {
		return fmt.Errorf("write image archive %s: %w", path, err)
	}
	return nil
}

func pathBase(ref string) string { return path.Base(ref) }

// layer writes files as an uncompressed tar with fixed timestamps, adding
// missing parent directories (0755, root).
func layer(files []File) ([]byte, error) {
	entries := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("file %q: path must be absolute", f.Path)
		}
		p := path.Clean(f.Path)
		entries[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Mode: fs.ModeDir | 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names) // parents before children
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, n := range names {
		f := entries[n]
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID, ModTime: epoch, Format: tar.FormatPAX}
		if f.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		var data []byte
		switch {
		case f.Mode&fs.ModeDir != 0:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Mode&fs.ModeSymlink != 0 || f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		default:
			h.Typeflag = tar.TypeReg
			data = f.Data
			if f.Source != "" {
				var err error
				if data, err = os.ReadFile(f.Source); err != nil {
					return nil, err
				}
			}
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
