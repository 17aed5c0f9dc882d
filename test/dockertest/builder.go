package dockertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/docker/docker/client"

	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/internal/executor/docker"
)

const (
	// EnvClusterDir is the local cluster's state directory
	// (test/cluster; default DefaultClusterDir), whose bin/ holds the
	// BuildKit and runc programs it built.
	EnvClusterDir = "KNOTLESS_TEST_CLUSTER"
	// DefaultClusterDir is test/cluster's default state directory.
	DefaultClusterDir = "/var/lib/knotless-test-cluster"
	// EnvClusterRequired, when "1" (make test sets it with
	// EnvRequired), turns missing BuildKit programs into a failure.
	EnvClusterRequired = "KNOTLESS_TEST_CLUSTER_REQUIRED"
)

var builderMu sync.Mutex

// BuilderImage returns the ref of the builder image (deploy.BuilderImage,
// as kubetest's Cluster.BuilderImage makes it for the cluster) made of
// this checkout's knotless-builder (built now, static) and the BuildKit
// and runc programs the local cluster's harness built
// (KNOTLESS_TEST_CLUSTER/bin/{buildkitd,buildctl,runc}: nothing is built
// again), loaded into the engine when missing; its tag is the digest of
// the four programs. Without those programs it skips the test ("make
// cluster-up builds them"), or fails it under
// KNOTLESS_TEST_CLUSTER_REQUIRED=1.
func (e *Engine) BuilderImage(t testing.TB) string {
	t.Helper()
	builderMu.Lock()
	defer builderMu.Unlock()
	dir := os.Getenv(EnvClusterDir)
	if dir == "" {
		dir = DefaultClusterDir
	}
	for _, p := range []string{"buildkitd", "buildctl", "runc"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", p)); err != nil {
			msg := fmt.Sprintf("the builder image needs the local cluster's %s: %v (make cluster-up builds BuildKit and runc)", p, err)
			if os.Getenv(EnvClusterRequired) == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := deploy.ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref, archive, err := deploy.LocalBuilderImage(ctx, root, t.TempDir(), filepath.Join(dir, "bin"), runtime.GOARCH, func(ref string) bool {
		_, err := e.Client.ImageInspect(ctx, ref)
		return err == nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if archive == "" {
		return ref
	}
	if err := loadArchive(ctx, e.Client, archive); err != nil {
		t.Fatalf("load the builder image %s: %v", ref, err)
	}
	return ref
}

// LoadArchive loads the docker image archive at path into the engine
// (docker load), failing the test on an error.
func (e *Engine) LoadArchive(t testing.TB, path string) {
	t.Helper()
	if err := loadArchive(context.Background(), e.Client, path); err != nil {
		t.Fatalf("docker load %s: %v", path, err)
	}
}

// loadArchive loads a docker image archive into the engine.
func loadArchive(ctx context.Context, c *client.Client, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := c.ImageLoad(ctx, f, client.ImageLoadWithQuiet(true))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return docker.StreamError(res.Body)
}
