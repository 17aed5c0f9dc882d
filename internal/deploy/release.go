package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// SumsFile is the release's list of SHA-256 digests, in sha256sum's
// format ("HEX  NAME", one file a line, sorted by name): `sha256sum -c
// SHA256SUMS` in the release's directory checks every file.
const SumsFile = "SHA256SUMS"

// ManifestName is the release's single-file manifest for version, e.g.
// "knotless-runner-0.20.0-dev-kubernetes.yaml".
func ManifestName(version string) string {
	return "knotless-runner-" + version + "-kubernetes.yaml"
}

// Kustomization is the directory, relative to the module root, that the
// release's single-file manifest is rendered from (the emptyDir variant).
const Kustomization = "deploy/kubernetes/overlays/emptydir"

// Release is what MakeRelease wrote.
type Release struct {
	Version   string            // VERSION's
	GoVersion string            // of the go command that built it, e.g. "go1.26.8"
	Dir       string            // where its files are
	Files     map[string]string // every file but SumsFile: file name → path
	Digests   map[string]string // SHA-256 of each of Files, by file name
	Manifest  string            // path of the single-file manifest (ManifestName)
	// Stale describes how the checkout's own manifest (Manifest, for
	// `kubectl apply -k`) differs from this build's digests, one file a
	// line; empty when it matches. The single-file manifest always holds
	// this build's.
	Stale string
}

// MakeRelease builds programs (nil: ReleasePrograms; they must include
// Programs) for linux on every one of Arches from the module at
// moduleRoot into dir, as Build does, renders the single-file manifest
// with their digests (Render) and writes SumsFile listing them all. Files
// of an earlier release in dir are replaced whole; other files are left
// alone. Errors: Build's, Render's, writing dir.
func MakeRelease(ctx context.Context, moduleRoot, dir string, programs []string) (*Release, error) {
	if programs == nil {
		programs = ReleasePrograms
	}
	for _, p := range Programs {
		if !slices.Contains(programs, p) {
			return nil, fmt.Errorf("a release without %s: its manifest installs %s", p, strings.Join(Programs, " and "))
		}
	}
	version, err := ReadVersion(moduleRoot)
	if err != nil {
		return nil, err
	}
	goVersion, err := GoVersion(ctx)
	if err != nil {
		return nil, err
	}
	files, err := BuildAll(ctx, moduleRoot, dir, programs...)
	if err != nil {
		return nil, err
	}
	digests, err := FileDigests(files)
	if err != nil {
		return nil, err
	}
	checkout, err := os.ReadFile(filepath.Join(moduleRoot, Manifest))
	if err != nil {
		return nil, err
	}
	rel := &Release{Version: version, GoVersion: goVersion, Dir: dir, Files: files, Digests: digests, Stale: Stale(checkout, digests)}
	text, err := Render(moduleRoot, version, goVersion, digests)
	if err != nil {
		return nil, err
	}
	name := ManifestName(version)
	rel.Manifest = filepath.Join(dir, name)
	if err := writeFileAtomic(rel.Manifest, text, 0o644); err != nil {
		return nil, err
	}
	files[name] = rel.Manifest
	if digests[name], err = FileDigest(rel.Manifest); err != nil {
		return nil, err
	}
	var sums strings.Builder
	for _, n := range sortedKeys(digests) {
		fmt.Fprintf(&sums, "%s  %s\n", digests[n], n)
	}
	if err := writeFileAtomic(filepath.Join(dir, SumsFile), []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	return rel, nil
}

// Render returns the single-file manifest of a release: the kustomization
// at Kustomization rendered with kustomize's own library, as `kubectl
// kustomize` does, with digests (by file name; every one of
// ManifestFiles; others are ignored) in place of the checkout's, every object labelled
// app.kubernetes.io/version=version, under a comment saying what to set
// before `kubectl apply -f`. The checkout is only read. Errors: a digest
// missing, kustomize's.
func Render(moduleRoot, version, goVersion string, digests map[string]string) ([]byte, error) {
	mine := map[string]string{}
	for _, name := range sortedKeys(ManifestFiles()) {
		if digests[name] == "" {
			return nil, fmt.Errorf("render the manifest: no digest of %s", name)
		}
		mine[name] = digests[name]
	}
	// The kustomization tree, copied into memory: the digests and the
	// version label go in there, not into the checkout.
	mem := filesys.MakeFsInMemory()
	src := filepath.Join(moduleRoot, "deploy", "kubernetes")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/kubernetes", filepath.ToSlash(rel)), data)
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", src, err)
	}
	deployment := path.Join("/kubernetes", strings.TrimPrefix(Manifest, "deploy/kubernetes/"))
	text, err := mem.ReadFile(deployment)
	if err != nil {
		return nil, err
	}
	if text, err = SetDigests(text, mine); err != nil {
		return nil, fmt.Errorf("%s: %w", Manifest, err)
	}
	if err := mem.WriteFile(deployment, text); err != nil {
		return nil, err
	}
	rel := strings.TrimPrefix(Kustomization, "deploy/kubernetes/")
	wrapper := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../%s
labels:
  - pairs:
      app.kubernetes.io/version: %q
    includeSelectors: false
`, rel, version)
	if err := mem.WriteFile("/kubernetes/release/kustomization.yaml", []byte(wrapper)); err != nil {
		return nil, err
	}
	// In kubectl kustomize's order: the namespace first, the ConfigMap
	// before the Deployment that reads it.
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	m, err := krusty.MakeKustomizer(opts).Run(mem, "/kubernetes/release")
	if err != nil {
		return nil, fmt.Errorf("render %s with kustomize: %w", Kustomization, err)
	}
	body, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, `# Knotless runner %[1]s for Kubernetes, in one file (docs/kubernetes.md):
#   kubectl apply -f %[2]s
# Rendered by make release from %[3]s
# (to customise, kubectl apply -k an overlay of yours over that directory
# instead). Before you apply it:
# - make the namespace knotless-runner and, in it, the Secret
#   knotless-runner holding the runner's credential (runner.json);
# - in the ConfigMap knotless-runner-settings-... below, set
#   KNOTLESS_DOWNLOAD_URL to where this release's files are, e.g.
#   https://SERVER/-/download for knotless-server --release-dir DIR,
#   and the job pods' image and size (KNOTLESS_IMAGE, KNOTLESS_CPUS, ...).
# The init container installs knotless-run for the pod's architecture and
# the step agent for every one (%[4]s), each checked
# against its SHA-256 below (KNOTLESS_*_SHA256_*), as the release's
# %[5]s lists them.
# Built with %[6]s.
`, version, ManifestName(version), Kustomization, strings.Join(prefixed("linux/", Arches), ", "), SumsFile, goVersion)
	out.Write(body)
	return out.Bytes(), nil
}

func prefixed(prefix string, s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = prefix + x
	}
	return out
}

// writeFileAtomic writes data to name through a file beside it and a
// rename, so a reader (a server serving the directory) never sees half of
// it.
func writeFileAtomic(name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}
