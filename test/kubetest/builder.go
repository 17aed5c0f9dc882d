package kubetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/internal/executor/kube"
)

// BuilderSeccompProfile is the builder's Localhost seccomp profile as job
// pods name it.
const BuilderSeccompProfile = kube.DefaultBuilderSeccompProfile

var builderOnce sync.Mutex

// BuilderImage returns the ref of the builder image (deploy.BuilderImage)
// made of this checkout's knotless-builder (built now, static) and the
// cluster's BuildKit and runc (test/cluster builds them:
// StateDir/bin/{buildkitd,buildctl,runc}), imported into the cluster when
// missing; its tag is the digest of the four programs, so a changed one is
// a new image. It also installs the builder's seccomp profile
// (InstallBuilderSeccompProfile).
func (c *Cluster) BuilderImage(t testing.TB) string {
	t.Helper()
	builderOnce.Lock()
	defer builderOnce.Unlock()
	c.InstallBuilderSeccompProfile(t)
	dir := t.TempDir()
	built, err := deploy.Build(context.Background(), moduleRoot(t), dir, runtime.GOARCH, "knotless-builder")
	if err != nil {
		t.Fatal(err)
	}
	progs := []string{built[deploy.FileName("knotless-builder", runtime.GOARCH)]}
	for _, p := range []string{"buildkitd", "buildctl", "runc"} {
		progs = append(progs, filepath.Join(c.StateDir, "bin", p))
	}
	h := sha256.New()
	for _, p := range progs {
		f, err := os.Open(p)
		if err != nil {
			t.Fatalf("the builder image's %s: %v (test/cluster builds BuildKit and runc: make cluster-down cluster-up)", filepath.Base(p), err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	ref := "localhost/knotless/builder:" + hex.EncodeToString(h.Sum(nil))[:16]
	if c.HasImage(t, ref) {
		return ref
	}
	img, err := deploy.BuilderImage(ref, runtime.GOARCH, progs[0], progs[1], progs[2], progs[3])
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "builder.tar")
	if err := deploy.WriteArchive(archive, img); err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, archive)
	return ref
}

// moduleRoot is the directory of the go.mod above the working directory
// (deploy.ModuleRoot).
func moduleRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := deploy.ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}
