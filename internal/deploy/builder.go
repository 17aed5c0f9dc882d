package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// BuilderImage is the image of a kube job pod's builder (container builds,
// docs/container-builds.md): busybox (for a person's `kubectl exec`) and,
// in /usr/local/bin, knotless-builder (its entrypoint), BuildKit's
// buildkitd and buildctl and runc (BuildKit's OCI worker runs build steps
// with it), each from the host path given; /etc/passwd and /etc/group with
// root and job (1000); /tmp 1777. It runs as root: the pod's own, in the
// pod's user namespace, which a builder always has. All four programs must
// be static for linux/arch. Errors: busybox-static missing.
func BuilderImage(ref, arch, builder, buildkitd, buildctl, runc string) (Image, error) {
	files, err := busyboxFiles()
	if err != nil {
		return Image{}, err
	}
	files = append(files, []File{
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/root", Mode: fs.ModeDir | 0o700},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\njob:x:1000:1000:job:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\njob:x:1000:\nnogroup:x:65534:\n")},
		{Path: "/usr/local/bin/knotless-builder", Mode: 0o755, Source: builder},
		{Path: "/usr/local/bin/buildkitd", Mode: 0o755, Source: buildkitd},
		{Path: "/usr/local/bin/buildctl", Mode: 0o755, Source: buildctl},
		{Path: "/usr/local/bin/runc", Mode: 0o755, Source: runc},
	}...)
	return Image{Ref: ref, Arch: arch, Files: files, User: "0:0", Entrypoint: []string{"/usr/local/bin/knotless-builder"},
		Env: []string{"PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}}, nil
}

// LocalBuilderImage writes the archive (WriteArchive) of a builder image
// (BuilderImage) made of the module at root's knotless-builder, built now
// into dir for linux/arch, and the buildkitd, buildctl and runc programs in
// binDir (what the tests' local cluster builds: StateDir/bin). It returns
// the image's ref, localhost/knotless/builder:TAG with TAG the first 16
// hex digits of the SHA-256 of the four programs (so a changed program is
// a new image), and the archive's path, "" when have(ref) says the image
// is already where it goes (nothing is written then). Errors: the build,
// a program missing or unreadable (naming it), the archive.
func LocalBuilderImage(ctx context.Context, root, dir, binDir, arch string, have func(ref string) bool) (ref, archive string, err error) {
	built, err := Build(ctx, root, dir, arch, "knotless-builder")
	if err != nil {
		return "", "", err
	}
	progs := []string{built[FileName("knotless-builder", arch)]}
	for _, p := range []string{"buildkitd", "buildctl", "runc"} {
		progs = append(progs, filepath.Join(binDir, p))
	}
	h := sha256.New()
	for _, p := range progs {
		f, err := os.Open(p)
		if err != nil {
			return "", "", fmt.Errorf("the builder image's %s: %w", filepath.Base(p), err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", "", fmt.Errorf("the builder image's %s: %w", filepath.Base(p), err)
		}
	}
	ref = "localhost/knotless/builder:" + hex.EncodeToString(h.Sum(nil))[:16]
	if have(ref) {
		return ref, "", nil
	}
	img, err := BuilderImage(ref, arch, progs[0], progs[1], progs[2], progs[3])
	if err != nil {
		return "", "", err
	}
	archive = filepath.Join(dir, "builder.tar")
	if err := WriteArchive(archive, img); err != nil {
		return "", "", err
	}
	return ref, archive, nil
}
