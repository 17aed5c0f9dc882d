package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The init container checks knotless-run and knotless-agent against the
// digests written in the manifest: after a change to the code they are
// stale until `make deploy-digests` writes them again, and an operator
// applying the manifests would get a pod that refuses the release files.
func TestDeploy_ManifestDigestsMatchTheBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds knotless-run and knotless-agent")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	progs, err := Build(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for p, path := range progs {
		if digests[p], err = FileDigest(path); err != nil {
			t.Fatal(err)
		}
	}
	manifest, err := os.ReadFile(filepath.Join(root, Manifest))
	if err != nil {
		t.Fatal(err)
	}
	if s := Stale(manifest, digests); s != "" {
		t.Fatalf("%s: stale digests: run `make deploy-digests` and commit the manifest\n%s", Manifest, s)
	}
}

// SetDigests writes each program's digest into its variable, leaves the
// rest of the text alone, and refuses a manifest without the variable.
func TestDeploy_SetDigestsWritesOnlyTheDigestValues(t *testing.T) {
	in := "env:\n  - name: KNOTLESS_RUN_SHA256\n    value: \"\"\n  - name: OTHER_SHA256\n    value: \"abc\"\n  - name: KNOTLESS_AGENT_SHA256\n    value: 00ff\n# tail\n"
	out, err := SetDigests([]byte(in), map[string]string{"knotless-run": "aa11", "knotless-agent": "bb22"})
	if err != nil {
		t.Fatal(err)
	}
	want := "env:\n  - name: KNOTLESS_RUN_SHA256\n    value: \"aa11\"\n  - name: OTHER_SHA256\n    value: \"abc\"\n  - name: KNOTLESS_AGENT_SHA256\n    value: \"bb22\"\n# tail\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if s := Stale(out, map[string]string{"knotless-run": "aa11", "knotless-agent": "bb22"}); s != "" {
		t.Fatalf("Stale after SetDigests: %s", s)
	}
	if s := Stale(out, map[string]string{"knotless-run": "cc33"}); !strings.Contains(s, "knotless-run") {
		t.Fatalf("Stale misses a changed digest: %q", s)
	}
	if _, err := SetDigests([]byte("env: []\n"), map[string]string{"knotless-run": "aa"}); err == nil || !strings.Contains(err.Error(), "KNOTLESS_RUN_SHA256") {
		t.Fatalf("a manifest without the variable: err %v, want one naming KNOTLESS_RUN_SHA256", err)
	}
}
