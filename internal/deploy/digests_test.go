package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The init container checks knotless-run and knotless-agent, for both
// architectures, against the digests written in the manifest: after a
// change to the code or VERSION they are stale until `make
// deploy-digests` writes them again, and an operator applying the
// manifests with -k would get a pod that refuses the release's files.
func TestDeploy_ManifestDigestsMatchTheBuild(t *testing.T) {
	rel := testRelease(t)
	manifest, err := os.ReadFile(filepath.Join(moduleRoot(t), Manifest))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for name := range ManifestFiles() {
		want[name] = rel.Digests[name]
	}
	if len(want) != len(Programs)*len(Arches) {
		t.Fatalf("the release has digests of %v, want %d files", want, len(Programs)*len(Arches))
	}
	if s := Stale(manifest, want); s != "" {
		t.Fatalf("%s: stale digests: run `make deploy-digests` and commit the manifest\n%s", Manifest, s)
	}
}

// SetDigests writes each file's digest into its variable, leaves the rest
// of the text alone, and refuses a manifest without the variable or a file
// the manifest names no digest of.
func TestDeploy_SetDigestsWritesOnlyTheDigestValues(t *testing.T) {
	in := "env:\n  - name: KNOTLESS_RUN_SHA256_AMD64\n    value: \"\"\n  - name: OTHER_SHA256_AMD64\n    value: \"abc\"\n  - name: KNOTLESS_AGENT_SHA256_ARM64\n    value: 00ff\n# tail\n"
	digests := map[string]string{"knotless-run-linux-amd64": "aa11", "knotless-agent-linux-arm64": "bb22"}
	out, err := SetDigests([]byte(in), digests)
	if err != nil {
		t.Fatal(err)
	}
	want := "env:\n  - name: KNOTLESS_RUN_SHA256_AMD64\n    value: \"aa11\"\n  - name: OTHER_SHA256_AMD64\n    value: \"abc\"\n  - name: KNOTLESS_AGENT_SHA256_ARM64\n    value: \"bb22\"\n# tail\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if s := Stale(out, digests); s != "" {
		t.Fatalf("Stale after SetDigests: %s", s)
	}
	if s := Stale(out, map[string]string{"knotless-run-linux-amd64": "cc33"}); !strings.Contains(s, "knotless-run-linux-amd64") || !strings.Contains(s, "KNOTLESS_RUN_SHA256_AMD64") {
		t.Fatalf("Stale misses a changed digest: %q", s)
	}
	if _, err := SetDigests([]byte("env: []\n"), map[string]string{"knotless-run-linux-arm64": "aa"}); err == nil || !strings.Contains(err.Error(), "KNOTLESS_RUN_SHA256_ARM64") {
		t.Fatalf("a manifest without the variable: err %v, want one naming KNOTLESS_RUN_SHA256_ARM64", err)
	}
	if _, err := SetDigests([]byte(in), map[string]string{"knotless-server-linux-amd64": "aa"}); err == nil || !strings.Contains(err.Error(), "knotless-server-linux-amd64") {
		t.Fatalf("a file the manifest holds no digest of: err %v, want one naming it", err)
	}
}

// The variables' names are the contract between the manifest, make
// deploy-digests and the docs.
func TestDeploy_DigestVariablesAreNamedByProgramAndArchitecture(t *testing.T) {
	got := ManifestFiles()
	want := map[string]string{
		"knotless-run-linux-amd64":   "KNOTLESS_RUN_SHA256_AMD64",
		"knotless-run-linux-arm64":   "KNOTLESS_RUN_SHA256_ARM64",
		"knotless-agent-linux-amd64": "KNOTLESS_AGENT_SHA256_AMD64",
		"knotless-agent-linux-arm64": "KNOTLESS_AGENT_SHA256_ARM64",
	}
	if len(got) != len(want) {
		t.Fatalf("ManifestFiles %v, want %v", got, want)
	}
	for f, env := range want {
		if got[f] != env {
			t.Errorf("%s: variable %q, want %q", f, got[f], env)
		}
	}
}
