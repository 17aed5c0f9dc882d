package deploy

import "io/fs"

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
