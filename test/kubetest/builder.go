package kubetest

import (
	"context"
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
	ref, archive, err := deploy.LocalBuilderImage(context.Background(), moduleRoot(t), t.TempDir(), filepath.Join(c.StateDir, "bin"), runtime.GOARCH,
		func(ref string) bool { return c.HasImage(t, ref) })
	if err != nil {
		t.Fatalf("%v (test/cluster builds BuildKit and runc: make cluster-down cluster-up)", err)
	}
	if archive == "" {
		return ref
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
