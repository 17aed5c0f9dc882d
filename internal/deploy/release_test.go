package deploy

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"knotless.dev/knotless/internal/testenv"
)

// shared is the release the tests of this package look at: knotless-run
// and knotless-agent for both architectures, made once by MakeRelease in a
// directory outside the work tree (Go's build cache makes a rebuild cheap).
var shared struct {
	once sync.Once
	dir  string
	rel  *Release
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func moduleRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func testRelease(t testing.TB) *Release {
	t.Helper()
	if testing.Short() {
		t.Skip("builds knotless-run and knotless-agent for linux/amd64 and linux/arm64")
	}
	root := moduleRoot(t)
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "knotless-release-test-"); shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		shared.rel, shared.err = MakeRelease(ctx, root, shared.dir, Programs)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.rel
}

// `make build` is what a developer runs: its knotless-run and
// knotless-agent must be the very files whose digests the manifest holds
// for this machine's architecture (it built knotless-run with cgo and no
// version, so a file from bin/ never passed the init container's check).
func TestRelease_MakeBuildMatchesTheManifestDigests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make build")
	}
	if runtime.GOOS != "linux" || !slices.Contains(Arches, runtime.GOARCH) {
		t.Skipf("make build makes %s/%s programs, which a release does not have", runtime.GOOS, runtime.GOARCH)
	}
	root := moduleRoot(t)
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-C", root, "build", "BIN="+bin, "GO="+goCommand())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	manifest, err := os.ReadFile(filepath.Join(root, Manifest))
	if err != nil {
		t.Fatal(err)
	}
	have := ReadDigests(manifest)
	for _, p := range Programs {
		got, err := FileDigest(filepath.Join(bin, p))
		if err != nil {
			t.Fatal(err)
		}
		if want := have[DigestEnv(p, runtime.GOARCH)]; got != want {
			t.Errorf("make build's %s has SHA-256 %s; the manifest's %s is %q (if TestDeploy_ManifestDigestsMatchTheBuild passes, the Makefile builds otherwise than deploy.Build: compare STATIC and LDFLAGS with BuildEnv and LDFlags)",
				p, got, DigestEnv(p, runtime.GOARCH), want)
		}
	}
}

// A release is reproducible: the same source, VERSION and Go release give
// the same bytes, from another checkout path, without .git, with other
// file times (a path, a VCS stamp or a time in a program would make every
// release's digests unique to its builder).
func TestRelease_TwoBuildsAreByteIdentical(t *testing.T) {
	rel := testRelease(t)
	root := moduleRoot(t)
	// The source the programs are built from, and nothing else, copied to
	// another path.
	copyDir := filepath.Join(t.TempDir(), "elsewhere", "knotless")
	for _, p := range []string{"go.mod", "go.sum", VersionFile, "cmd", "internal"} {
		if err := copyTree(filepath.Join(root, p), filepath.Join(copyDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(copyDir, ".git")); err == nil {
		t.Fatal("the copy has .git")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	again, err := BuildAll(ctx, copyDir, t.TempDir(), Programs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(Programs)*len(Arches) {
		t.Fatalf("built %v", again)
	}
	for name, p := range again {
		d, err := FileDigest(p)
		if err != nil {
			t.Fatal(err)
		}
		if d != rel.Digests[name] {
			t.Errorf("%s: built in %s it has SHA-256 %s, built in %s %s: not reproducible", name, root, rel.Digests[name], copyDir, d)
		}
	}
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// Every program of a release is a static Linux program of its
// architecture (no interpreter: it runs on any libc, musl included, and in
// any job image) carrying VERSION, not "dev".
func TestRelease_FilesAreStaticProgramsOfTheirArchitectureWithTheVersion(t *testing.T) {
	rel := testRelease(t)
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, p := range Programs {
		for _, a := range Arches {
			name := FileName(p, a)
			path, ok := rel.Files[name]
			if !ok {
				t.Errorf("the release has no %s", name)
				continue
			}
			f, err := elf.Open(path)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if f.Machine != machine[a] {
				t.Errorf("%s: ELF machine %v, want %v", name, f.Machine, machine[a])
			}
			for _, prog := range f.Progs {
				if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
					t.Errorf("%s: has a %v program header: not static", name, prog.Type)
				}
			}
			f.Close()
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte(rel.Version)) {
				t.Errorf("%s: does not hold the version %q", name, rel.Version)
			}
		}
	}
	// This machine's own say their version.
	for p, args := range map[string][]string{"knotless-run": {"--version"}, "knotless-agent": {"version"}} {
		path, ok := rel.Files[FileName(p, runtime.GOARCH)]
		if !ok || runtime.GOOS != "linux" {
			continue
		}
		out, err := exec.Command(path, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), rel.Version) {
			t.Errorf("%s %s: %v: %q, want the version %s", filepath.Base(path), strings.Join(args, " "), err, out, rel.Version)
		}
	}
}

// SHA256SUMS is in sha256sum's format and lists every file of the
// release: `sha256sum -c` passes in the release's directory.
func TestRelease_SHA256SUMSChecksWithSha256sum(t *testing.T) {
	rel := testRelease(t)
	testenv.LookPath(t, "sha256sum", "coreutils")
	cmd := exec.Command("sha256sum", "-c", "--strict", SumsFile)
	cmd.Dir = rel.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sha256sum -c %s: %v\n%s", SumsFile, err, out)
	}
	entries, err := os.ReadDir(rel.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != SumsFile && !strings.Contains(string(out), e.Name()+": OK") {
			t.Errorf("%s does not list %s:\n%s", SumsFile, e.Name(), out)
		}
	}
	if !strings.Contains(string(out), ManifestName(rel.Version)+": OK") {
		t.Errorf("%s does not list the manifest:\n%s", SumsFile, out)
	}
}

// The one-file manifest is the kustomization rendered: every object of
// it, in the runner's namespace, labelled with the version, the init
// container holding this build's digests and the base's script, the
// Deployment naming the ConfigMap the file holds.
func TestRelease_RenderedManifestHoldsTheBuildDigests(t *testing.T) {
	rel := testRelease(t)
	text, err := os.ReadFile(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(text), "# Knotless runner "+rel.Version) || !strings.Contains(string(text), "kubectl apply -f "+ManifestName(rel.Version)) {
		t.Errorf("the manifest does not begin by saying what it is and how to apply it:\n%.600s", text)
	}
	objs := decodeAll(t, text)
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		kinds[o.GetKind()] = o
		if got := o.GetLabels()["app.kubernetes.io/version"]; got != rel.Version {
			t.Errorf("%s %s: label app.kubernetes.io/version %q, want %q", o.GetKind(), o.GetName(), got, rel.Version)
		}
		if ns := o.GetNamespace(); o.GetKind() != "Namespace" && ns != "knotless-runner" {
			t.Errorf("%s %s: namespace %q, want knotless-runner", o.GetKind(), o.GetName(), ns)
		}
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "NetworkPolicy"} {
		if kinds[k] == nil {
			t.Errorf("the manifest has no %s", k)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	var dep appsv1.Deployment
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(kinds["Deployment"].Object, &dep); err != nil {
		t.Fatal(err)
	}
	init := dep.Spec.Template.Spec.InitContainers
	if len(init) != 1 || init[0].Name != "install" {
		t.Fatalf("init containers %+v, want install", init)
	}
	env := map[string]string{}
	for _, e := range init[0].Env {
		env[e.Name] = e.Value
	}
	for name, v := range ManifestFiles() {
		if env[v] != rel.Digests[name] {
			t.Errorf("%s=%q, want the digest of %s, %s", v, env[v], name, rel.Digests[name])
		}
	}
	base := baseDeployment(t)
	if got, want := init[0].Args, base.Spec.Template.Spec.InitContainers[0].Args; !slices.Equal(got, want) {
		t.Errorf("the init container's script differs from %s's", Manifest)
	}
	cm := kinds["ConfigMap"].GetName()
	var refs []string
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				refs = append(refs, e.ConfigMapRef.Name)
			}
		}
	}
	if !slices.Equal(refs, []string{cm}) {
		t.Errorf("the runner takes its settings from %v; the manifest's ConfigMap is %s", refs, cm)
	}
}

func decodeAll(t testing.TB, text []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(text)))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &o.Object); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		objs = append(objs, o)
	}
	return objs
}

func baseDeployment(t testing.TB) appsv1.Deployment {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(moduleRoot(t), Manifest))
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, text)
	var dep appsv1.Deployment
	if len(objs) != 1 {
		t.Fatalf("%s: %d objects", Manifest, len(objs))
	}
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, &dep); err != nil {
		t.Fatal(err)
	}
	return dep
}

// A VERSION that cannot be a label value, a file name part and a linker
// flag is refused, naming the file.
func TestRelease_VersionFileRefusesWhatALabelCannotHold(t *testing.T) {
	for v, ok := range map[string]bool{"0.20.0-dev\n": true, " 1.0 \n": true, "v1.2.3_rc.1": true, "": false, "1.0+build.5": false, "1.0 beta": false, "-dev": false, "1.0.": false, strings.Repeat("1", 64): false} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, VersionFile), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadVersion(dir)
		if ok && (err != nil || got != strings.TrimSpace(v)) {
			t.Errorf("VERSION %q: %q, %v; want it", v, got, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), filepath.Join(dir, VersionFile))) {
			t.Errorf("VERSION %q: %q, %v; want an error naming the file", v, got, err)
		}
	}
	if _, err := ReadVersion(t.TempDir()); err == nil || !strings.Contains(err.Error(), VersionFile) {
		t.Errorf("no VERSION: %v, want an error naming it", err)
	}
}
