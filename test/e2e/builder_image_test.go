package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"knotless.dev/knotless/test/dockertest"
)

var builderRef = regexp.MustCompile(`(localhost/knotless/builder:[0-9a-f]{16}) in `)

// make builder-image, as docs/container-builds.md tells an operator to
// make the builder image: it builds (or finds cached) BuildKit and runc
// with the local cluster's harness, writes an archive that docker load
// takes, and prints the image's name, which the engine then has.
func TestBuilderImage_MakeTargetWritesALoadableImage(t *testing.T) {
	t.Parallel()
	eng := dockertest.Connect(t)
	bin := t.TempDir()
	out, err := exec.Command("make", "-C", moduleRoot, "--no-print-directory", "builder-image", "BIN="+bin).CombinedOutput()
	if err != nil {
		t.Fatalf("make builder-image: %v\n%s", err, out)
	}
	m := builderRef.FindSubmatch(out)
	if m == nil {
		t.Fatalf("make builder-image printed no image name:\n%s", out)
	}
	eng.LoadArchive(t, filepath.Join(bin, "knotless-builder-image.tar"))
	img, err := eng.Client.ImageInspect(context.Background(), string(m[1]))
	if err != nil {
		t.Fatalf("the engine has no %s after docker load: %v", m[1], err)
	}
	if len(img.Config.Entrypoint) != 1 || img.Config.Entrypoint[0] != "/usr/local/bin/knotless-builder" {
		t.Errorf("the image's entrypoint is %q, want knotless-builder", img.Config.Entrypoint)
	}
}
