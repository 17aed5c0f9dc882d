package kubetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"knotless.dev/knotless/internal/deploy"
)

// BuilderSeccompProfile is the builder's Localhost seccomp profile as job
// pods name it (kube.DefaultBuilderSeccompProfile).
const BuilderSeccompProfile = "knotless/builder.json"

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
	root := moduleRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "knotless-builder")
	cmd := exec.Command(goTool(), "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/knotless-builder")
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/knotless-builder: %v\n%s", err, out)
	}
	progs := []string{bin}
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

// InstallBuilderSeccompProfile writes deploy/kubernetes/builds'
// builder-seccomp.json into the kubelet's seccomp directory as
// BuilderSeccompProfile, as the deploy manifests' DaemonSet does on a
// node (the local cluster's kubelet root is StateDir/kubelet/root).
func (c *Cluster) InstallBuilderSeccompProfile(t testing.TB) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(moduleRoot(t), "deploy", "kubernetes", "builds", "builder-seccomp.json"))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(c.StateDir, "kubelet", "root", "seccomp", BuilderSeccompProfile)
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, src) {
		return
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, src, 0o644); err != nil {
		t.Fatal(err)
	}
}

// moduleRoot is the directory of knotless.dev/knotless's go.mod, above
// the working directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module knotless.dev/knotless\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of knotless.dev/knotless above the working directory")
		}
		dir = parent
	}
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}
