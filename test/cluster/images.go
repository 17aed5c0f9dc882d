package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image is a one-layer image built from files on this machine; no registry
// is involved. Name it under localhost/ with a tag other than latest, so
// the kubelet never tries to pull it.
type Image struct {
	Ref        string // e.g. "localhost/knotless/job-base:1"
	Files      []File // the layer; parent directories are added as needed (0755, root)
	User       string // numeric "UID" or "UID:GID"; empty = root
	Entrypoint []string
	Cmd        []string
	Env        []string // NAME=VALUE
	WorkingDir string
}

// File is one entry of an image's layer. Exactly one of Source, Data, Link
// is used; a directory has Mode with fs.ModeDir.
type File struct {
	Path     string      // absolute path inside the image
	Mode     fs.FileMode // permission bits, plus fs.ModeDir for a directory
	Source   string      // host file whose content is copied
	Data     []byte      // literal content
	Link     string      // symlink target
	UID, GID int
}

// JobBaseImage is the image job pods run in the tests: busybox-static with
// one symlink per applet, /tmp 1777 and user 1000 ("job").
const JobBaseImage = "localhost/knotless/job-base:1"

// JobRootImage is JobBaseImage whose default user is root (0:0, HOME
// /root): for tests of --run-as and of Pod Security "restricted" refusing
// a pod that would run as root.
const JobRootImage = "localhost/knotless/job-root:1"

// JobNoTarImage has a /bin/sh (Debian's dash) and a few coreutils (cat,
// head, wc, mkdir, rm, ls, chmod, sleep, true, env) with their shared
// libraries, and no tar and no busybox (whose sh runs its tar applet even
// without a symlink): for proving an executor needs no tar in the job
// image. User 1000, /tmp 1777.
const JobNoTarImage = "localhost/knotless/job-notar:1"

// JobOwnPathImage is JobBaseImage laid out as images such as golang's
// are: tools in directories only its own PATH names (ENV PATH=
// /usr/local/go/bin:/opt/t/bin:/usr/bin:/bin): `go` (a stand-in that
// prints what it was asked) in /usr/local/go/bin and `hello` in
// /opt/t/bin, so that a step finds them only through the image's PATH.
const JobOwnPathImage = "localhost/knotless/job-ownpath:1"

// OwnPathEnv is JobOwnPathImage's PATH.
const OwnPathEnv = "PATH=/usr/local/go/bin:/opt/t/bin:/usr/bin:/bin"

// JobFakeArmImage is JobNoTarImage whose `uname -m` says aarch64 (a
// script): a job pod on this amd64 node
// that reports arm64, for the runner's choice of the step agent by the
// pod's architecture, and for what an agent of the wrong one does.
const JobFakeArmImage = "localhost/knotless/job-fakearm:2"

// JobArm64OnlyImage is JobBaseImage whose /bin/sh is a program for arm64
// (a minimal aarch64 ELF): on an amd64 node its PID 1 cannot execute
// (exec format error), as an arm64-only image's cannot.
const JobArm64OnlyImage = "localhost/knotless/job-arm64only:1"

// JobPostgresImage is JobBaseImage with this machine's PostgreSQL
// (Debian's postgresql: its server, initdb and psql on PATH, with their
// libraries and share files) and /usr/local/bin/pg-service, which
// initializes a database in /tmp/pgdata (a password from
// $POSTGRES_PASSWORD when set, for TCP; else trust) and runs the server on
// 127.0.0.1:5432 as the container's user: the services tests' database,
// and a job image whose steps have psql. Up skips it on a machine without
// PostgreSQL.
const JobPostgresImage = "localhost/knotless/job-postgres:2"

// CoreDNSImage holds our CoreDNS build (no forward plugin).
const CoreDNSImage = "localhost/knotless/coredns:v1.15.0"

// images returns every image Up imports. Later parts of Knotless add theirs
// here (one Image each); images that need no build step go in jobImages,
// which Up also imports into a running cluster when they are missing.
func (c Config) images(ctx context.Context, b Binaries) ([]Image, error) {
	pause, err := c.buildPause(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := jobImages()
	if err != nil {
		return nil, err
	}
	return append([]Image{
		{Ref: PauseImage, Files: []File{{Path: "/pause", Mode: 0o755, Source: pause}}, User: "65535", Entrypoint: []string{"/pause"}},
		{Ref: CoreDNSImage, Files: []File{{Path: "/coredns", Mode: 0o755, Source: b.CoreDNS}}, User: "65534", Entrypoint: []string{"/coredns"}},
	}, jobs...), nil
}

// jobImages are the images job pods use in the tests, made from this
// machine's files alone (no build, no binaries of the cluster). A changed
// image needs a new tag: a running cluster imports only missing refs.
func jobImages() ([]Image, error) {
	jobBase, err := busyboxImage(JobBaseImage)
	if err != nil {
		return nil, err
	}
	root, err := busyboxImage(JobRootImage)
	if err != nil {
		return nil, err
	}
	root.User = "0:0"
	root.WorkingDir = "/root"
	root.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	noTar, err := noTarImage(JobNoTarImage)
	if err != nil {
		return nil, err
	}
	ownPath, err := busyboxImage(JobOwnPathImage)
	if err != nil {
		return nil, err
	}
	ownPath.Files = append(ownPath.Files, OwnPathFiles...)
	ownPath.Env = []string{OwnPathEnv, "HOME=/home/job"}
	// dash, not busybox: busybox's sh runs its own uname applet, never a
	// file in its place.
	fakeArm, err := noTarImage(JobFakeArmImage)
	if err != nil {
		return nil, err
	}
	fakeArm.Files = replaceFile(fakeArm.Files, File{Path: "/bin/uname", Mode: 0o755, Data: []byte("#!/bin/sh\necho aarch64\n")})
	arm64Only, err := busyboxImage(JobArm64OnlyImage)
	if err != nil {
		return nil, err
	}
	arm64Only.Files = replaceFile(arm64Only.Files, File{Path: "/bin/sh", Mode: 0o755, Data: aarch64ELF()})
	imgs := []Image{jobBase, root, noTar, ownPath, fakeArm, arm64Only}
	pg, err := postgresImage(JobPostgresImage)
	if err != nil {
		return nil, err
	}
	if pg.Ref != "" {
		imgs = append(imgs, pg)
	}
	return imgs, nil
}

// PGServiceScript is JobPostgresImage's /usr/local/bin/pg-service.
const PGServiceScript = `#!/bin/sh
set -e
export TZ=UTC
D=/tmp/pgdata
rm -rf "$D"
if [ -n "$POSTGRES_PASSWORD" ]; then
	printf '%s' "$POSTGRES_PASSWORD" > /tmp/pw
	initdb -D "$D" -U postgres --no-locale -E UTF8 --auth-local=trust --auth-host=scram-sha-256 --pwfile=/tmp/pw > /tmp/initdb.log 2>&1 || { cat /tmp/initdb.log; exit 1; }
	rm -f /tmp/pw
else
	initdb -D "$D" -U postgres --no-locale -E UTF8 --auth=trust > /tmp/initdb.log 2>&1 || { cat /tmp/initdb.log; exit 1; }
fi
echo "pg-service: database initialized; starting the server on 127.0.0.1:${PGPORT:-5432}"
exec postgres -D "$D" -k /tmp -c listen_addresses=127.0.0.1 -c port="${PGPORT:-5432}" -c fsync=off -c shared_buffers=16MB -c jit=off
`

// postgresImage is JobPostgresImage (see there); an Image with no Ref when
// this machine has no PostgreSQL.
func postgresImage(ref string) (Image, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		return Image{}, nil
	}
	img, err := busyboxImage(ref)
	if err != nil {
		return Image{}, err
	}
	files, binDir, err := PostgresFiles(filepath.Dir(filepath.Dir(bins[len(bins)-1])))
	if err != nil {
		return Image{}, err
	}
	img.Files = append(img.Files, files...)
	img.Files = append(img.Files, File{Path: "/usr/local/bin/pg-service", Mode: 0o755, Data: []byte(PGServiceScript)})
	img.Env = []string{"PATH=/usr/local/bin:" + binDir + ":/usr/bin:/bin", "HOME=/home/job", "TZ=UTC"}
	return img, nil
}

// PostgresFiles are the files of the PostgreSQL installation in dir
// (/usr/lib/postgresql/15) and its share directory, the shared libraries
// its programs load (ldd) and the UTC time zone, at their paths on this
// machine; binDir is its bin directory.
func PostgresFiles(dir string) (files []File, binDir string, err error) {
	share := "/usr/share/postgresql/" + filepath.Base(dir)
	libs := map[string]bool{}
	for _, root := range []string{dir, share} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case strings.Contains(p, "/bitcode") || strings.Contains(p, "llvmjit"):
				// The JIT (and the LLVM library it loads, ~100 MB): off
				// without it.
				if d.IsDir() {
					return filepath.SkipDir
				}
			case d.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				files = append(files, File{Path: p, Mode: fs.ModeSymlink | 0o777, Link: target})
			case d.Type().IsRegular():
				fi, err := d.Info()
				if err != nil {
					return err
				}
				files = append(files, File{Path: p, Mode: fi.Mode().Perm(), Source: p})
				if fi.Mode()&0o111 != 0 || strings.HasSuffix(p, ".so") {
					out, _ := exec.Command("ldd", p).Output() // not every file is a program
					for _, f := range strings.Fields(string(out)) {
						if strings.HasPrefix(f, "/") {
							libs[f] = true
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, "", fmt.Errorf("PostgreSQL files under %s: %w", root, err)
		}
	}
	for lib := range libs {
		files = append(files, File{Path: lib, Mode: 0o755, Source: lib})
	}
	for _, tz := range []string{"/usr/share/zoneinfo/UTC", "/usr/share/zoneinfo/Etc/UTC"} {
		if _, err := os.Stat(tz); err == nil {
			files = append(files, File{Path: tz, Mode: 0o644, Source: tz})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, filepath.Join(dir, "bin"), nil
}

// replaceFile returns files with f in place of the entry of its path.
func replaceFile(files []File, f File) []File {
	out := make([]File, 0, len(files)+1)
	for _, g := range files {
		if g.Path != f.Path {
			out = append(out, g)
		}
	}
	return append(out, f)
}

// aarch64ELF is the smallest executable ELF file for arm64 (a 64-byte
// header and one PT_LOAD program header, its code an endless loop): the
// kernel of an amd64 node refuses it by its machine (exec format error)
// before anything runs.
func aarch64ELF() []byte {
	b := make([]byte, 64+56+4)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // 64-bit, little-endian, version 1
	le := func(off int, v uint64, n int) {
		for i := 0; i < n; i++ {
			b[off+i] = byte(v >> (8 * i))
		}
	}
	const base = 0x400000
	le(16, 2, 2)              // e_type ET_EXEC
	le(18, 183, 2)            // e_machine EM_AARCH64
	le(20, 1, 4)              // e_version
	le(24, base+64+56, 8)     // e_entry
	le(32, 64, 8)             // e_phoff
	le(52, 64, 2)             // e_ehsize
	le(54, 56, 2)             // e_phentsize
	le(56, 1, 2)              // e_phnum
	le(64, 1, 4)              // p_type PT_LOAD
	le(68, 5, 4)              // p_flags R+X
	le(72, 0, 8)              // p_offset
	le(80, base, 8)           // p_vaddr
	le(88, base, 8)           // p_paddr
	le(96, uint64(len(b)), 8) // p_filesz
	le(104, uint64(len(b)), 8)
	le(112, 0x1000, 8)     // p_align
	le(120, 0x14000000, 4) // b . (branch to itself)
	return b
}

// OwnPathFiles are the tools JobOwnPathImage has only on its own PATH.
var OwnPathFiles = []File{
	{Path: "/usr/local/go/bin/go", Mode: 0o755, Data: []byte("#!/bin/sh\necho \"go (the image's own, on its PATH): $*\"\n")},
	{Path: "/opt/t/bin/hello", Mode: 0o755, Data: []byte("#!/bin/sh\necho \"hello from the image's own PATH\"\n")},
}

// ensureJobImages imports, into the running cluster's containerd, every
// job image whose ref it does not hold yet (one `ctr images ls`, so it is
// cheap when all are there). It leaves present images alone.
func (c Config) ensureJobImages(ctx context.Context) error {
	out, err := run(ctx, c.bin("ctr"), "--address", c.containerdSocket(), "-n", "k8s.io", "images", "ls", "-q")
	if err != nil {
		return fmt.Errorf("list images: %w", err)
	}
	have := map[string]bool{}
	for _, ref := range strings.Fields(out) {
		have[ref] = true
	}
	imgs, err := jobImages()
	if err != nil {
		return err
	}
	for _, img := range imgs {
		if have[img.Ref] {
			continue
		}
		if err := c.ImportImage(ctx, img); err != nil {
			return err
		}
	}
	return nil
}

// noTarImage is dash as /bin/sh, a few coreutils and the shared libraries
// they load (found with ldd), /tmp 1777 and /etc/passwd with root, job
// (1000) and nobody; it runs as 1000.
func noTarImage(ref string) (Image, error) {
	bins := map[string]string{ // path in the image → host file
		"/bin/sh": "/bin/dash", "/bin/dash": "/bin/dash",
		"/bin/cat": "/bin/cat", "/bin/head": "/usr/bin/head", "/bin/wc": "/usr/bin/wc",
		"/bin/mkdir": "/bin/mkdir", "/bin/rm": "/bin/rm", "/bin/ls": "/bin/ls",
		"/bin/chmod": "/bin/chmod", "/bin/sleep": "/bin/sleep", "/bin/true": "/bin/true",
		"/usr/bin/env": "/usr/bin/env",
	}
	files := []File{
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/root", Mode: fs.ModeDir | 0o700},
		{Path: "/home/job", Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\njob:x:1000:1000:job:/home/job:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\njob:x:1000:\nnogroup:x:65534:\n")},
	}
	libs := map[string]bool{}
	for dst, src := range bins {
		files = append(files, File{Path: dst, Mode: 0o755, Source: src})
		out, err := exec.Command("ldd", src).Output()
		if err != nil {
			return Image{}, fmt.Errorf("ldd %s: %w", src, err)
		}
		// Lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
		// "/lib64/ld-linux-x86-64.so.2 (0x...)": every absolute path is a
		// library to copy, at the path the binary asks for.
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				libs[f] = true
			}
		}
	}
	for lib := range libs {
		files = append(files, File{Path: lib, Mode: 0o755, Source: lib})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return Image{Ref: ref, Files: files, User: "1000:1000", Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/job"}, WorkingDir: "/home/job", Cmd: []string{"/bin/sh"}}, nil
}

// buildPause compiles ./pause (static) into STATE/images/pause.
func (c Config) buildPause(ctx context.Context) (string, error) {
	out := c.path("images", "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./pause")
	cmd.Dir = c.SourceDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the pause program: %w: %s", err, b)
	}
	return out, nil
}

// busyboxImage is /bin/busybox from Debian's busybox-static with a symlink
// per applet (as `busybox --list-full` names them), /tmp 1777, and
// /etc/passwd with root, job (1000) and nobody; it runs as 1000.
func busyboxImage(ref string) (Image, error) {
	const bb = "/bin/busybox"
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return Image{}, fmt.Errorf("list busybox applets (is busybox-static installed?): %w", err)
	}
	files := []File{
		{Path: bb, Mode: 0o755, Source: bb},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/root", Mode: fs.ModeDir | 0o700},
		{Path: "/home/job", Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\njob:x:1000:1000:job:/home/job:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\njob:x:1000:\nnogroup:x:65534:\n")},
	}
	for _, applet := range strings.Fields(string(out)) {
		p := "/" + strings.TrimPrefix(applet, "/")
		if p == bb {
			continue
		}
		files = append(files, File{Path: p, Mode: fs.ModeSymlink | 0o777, Link: bb})
	}
	return Image{Ref: ref, Files: files, User: "1000:1000", Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/job"}, WorkingDir: "/home/job", Cmd: []string{"/bin/sh"}}, nil
}

// ImportImage builds img as a docker image archive under STATE/images and
// imports it into containerd's k8s.io namespace (`ctr images import`), so
// pods can use it with imagePullPolicy IfNotPresent or Never. containerd
// must be running. Importing the same Ref again replaces the image.
func (c Config) ImportImage(ctx context.Context, img Image) error {
	if strings.HasSuffix(img.Ref, ":latest") || !strings.Contains(path.Base(img.Ref), ":") {
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
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config = v1.Config{User: img.User, Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env, WorkingDir: img.WorkingDir}
	if v1img, err = mutate.ConfigFile(v1img, cf); err != nil {
		return err
	}
	archive := c.path("images", strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
	if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(archive, tag, v1img); err != nil {
		return fmt.Errorf("write image archive %s: %w", archive, err)
	}
	if _, err := run(ctx, c.bin("ctr"), "--address", c.containerdSocket(), "-n", "k8s.io", "images", "import", "--snapshotter", "overlayfs", archive); err != nil {
		return fmt.Errorf("import image %s: %w", img.Ref, err)
	}
	c.Log.Info("imported image", "ref", img.Ref, "size", len(layerTar))
	return nil
}

// layer writes files as an uncompressed tar with fixed timestamps, adding
// missing parent directories.
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
