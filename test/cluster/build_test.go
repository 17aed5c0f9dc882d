package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testOptions(t *testing.T) (BuildOptions, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	return BuildOptions{
		CacheDir: t.TempDir(),
		Log:      slog.New(slog.NewTextHandler(&logs, nil)),
	}, &logs
}

// The kube build reuses the go build cache of earlier builds only while its
// ldflags stay byte-identical to theirs.
func TestKubeLDFlags_SameAsTheFirstKubeBuild(t *testing.T) {
	want := "-s -w " +
		"-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 " +
		"-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitCommit=v1.37.2 " +
		"-X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z " +
		"-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37 " +
		"-X k8s.io/client-go/pkg/version.gitVersion=v1.37.2 -X k8s.io/client-go/pkg/version.gitCommit=v1.37.2 " +
		"-X k8s.io/client-go/pkg/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.buildDate=2026-01-01T00:00:00Z"
	if got := kubeLDFlags("v1.37.2"); got != want {
		t.Errorf("kubeLDFlags(v1.37.2) =\n%s\nwant\n%s", got, want)
	}
}

func TestCachedBinaries_OnlyWhenAllAreExecutables(t *testing.T) {
	o, _ := testOptions(t)
	b, ok := CachedBinaries(o)
	if ok {
		t.Fatal("empty cache reported as complete")
	}
	want := map[string]string{
		b.Kube:            filepath.Join(o.CacheDir, "kubernetes-v1.37.2-knotless1", "kube"),
		b.NetworkPolicies: filepath.Join(o.CacheDir, "kube-network-policies-v0.8.0-knotless2", "kube-network-policies"),
		b.CoreDNS:         filepath.Join(o.CacheDir, "coredns-v1.15.0-knotless2", "coredns"),
		b.Runsc:           filepath.Join(o.CacheDir, "gvisor-v0.0.0-20260905035102-160fafc42237-knotless1", "runsc"),
		b.RunscShim:       filepath.Join(o.CacheDir, "gvisor-v0.0.0-20260905035102-160fafc42237-knotless1", "containerd-shim-runsc-v1"),
	}
	for got, w := range want {
		if got != w {
			t.Errorf("path %s, want %s", got, w)
		}
	}
	writeExecutable(t, b.Kube, "")
	writeExecutable(t, b.NetworkPolicies, "")
	writeExecutable(t, b.Runsc, "")
	writeExecutable(t, b.RunscShim, "")
	for _, p := range []string{b.Containerd, b.Ctr, b.RuncShim, b.Runc, b.Buildkitd, b.Buildctl, b.Registry} {
		writeExecutable(t, p, "")
	}
	if err := os.MkdirAll(filepath.Dir(b.CoreDNS), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.CoreDNS, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := CachedBinaries(o); ok {
		t.Fatal("a non-executable coredns counted as cached")
	}
	writeExecutable(t, b.CoreDNS, "")
	if err := os.Remove(b.RunscShim); err != nil {
		t.Fatal(err)
	}
	if _, ok := CachedBinaries(o); ok {
		t.Fatal("a cache without the runsc shim counted as complete")
	}
	writeExecutable(t, b.RunscShim, "")
	if got, ok := CachedBinaries(o); !ok || got != b {
		t.Fatalf("CachedBinaries = %+v, %v; want %+v, true", got, ok, b)
	}
}

// The path is also test/kwok's KubeBinary default: change both.
func TestCachedBinaries_DefaultCacheDir(t *testing.T) {
	b, _ := CachedBinaries(BuildOptions{})
	if want := "/var/cache/knotless-test-cluster/kubernetes-v1.37.2-knotless1/kube"; b.Kube != want {
		t.Errorf("Kube = %s, want %s", b.Kube, want)
	}
}

func TestBuild_CachedBinariesAreNotRebuilt(t *testing.T) {
	o, logs := testOptions(t)
	b := o.paths()
	for _, p := range b.all() {
		writeExecutable(t, p, "")
	}
	t.Setenv("PATH", "") // any go command run would fail
	got, err := Build(context.Background(), o)
	if err != nil {
		t.Fatalf("Build with a full cache: %v", err)
	}
	if got != b {
		t.Errorf("Build = %+v, want %+v", got, b)
	}
	if n := strings.Count(logs.String(), "binary cached"); n != len(b.all()) {
		t.Errorf("logged %d cached binaries, want %d:\n%s", n, len(b.all()), logs)
	}
}

func TestBuild_MissingSourceDirFailsAndLeavesNothing(t *testing.T) {
	o, _ := testOptions(t)
	_, err := Build(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "SourceDir") {
		t.Fatalf("Build without SourceDir: err = %v, want one naming SourceDir", err)
	}
	assertCacheHolds(t, o.CacheDir, ".build.lock")
}

func TestGoBuild_FailedBuildLeavesNothingInTheCache(t *testing.T) {
	o, logs := testOptions(t)
	src := writeModule(t, "package main\n\nfunc main() { undefined() }\n")
	out := filepath.Join(o.CacheDir, "thing-v1", "thing")
	err := goBuild(context.Background(), o, src, ".", []string{"-trimpath"}, out, nil)
	if err == nil || !strings.Contains(err.Error(), "undefined") {
		t.Fatalf("goBuild of a broken package: err = %v, want the compiler's message", err)
	}
	assertCacheHolds(t, o.CacheDir)
	if !strings.Contains(logs.String(), "build failed") {
		t.Errorf("failure not logged:\n%s", logs)
	}
}

func TestGoBuild_WritesTheBinaryAndLogsCommandAndDuration(t *testing.T) {
	o, logs := testOptions(t)
	src := writeModule(t, "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"built\") }\n")
	out := filepath.Join(o.CacheDir, "thing-v1", "thing")
	if err := goBuild(context.Background(), o, src, ".", []string{"-trimpath", "-ldflags", "-s -w"}, out, nil); err != nil {
		t.Fatalf("goBuild: %v", err)
	}
	if !isExecutable(out) {
		t.Fatalf("%s is not an executable", out)
	}
	assertCacheHolds(t, o.CacheDir, "thing-v1", "thing-v1/thing")
	for _, want := range []string{"build start", "'-s -w'", "CGO_ENABLED=0 GOFLAGS=-buildvcs=false", "build done", "duration="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

func TestGoBuild_RejectedCheckLeavesNothingInTheCache(t *testing.T) {
	o, _ := testOptions(t)
	src := writeModule(t, "package main\n\nfunc main() {}\n")
	out := filepath.Join(o.CacheDir, "thing-v1", "thing")
	reject := func(context.Context, string) error { return os.ErrInvalid }
	if err := goBuild(context.Background(), o, src, ".", nil, out, reject); err == nil {
		t.Fatal("goBuild succeeded although its check failed")
	}
	assertCacheHolds(t, o.CacheDir)
}

func TestCheckCoreDNSPlugins_RefusesABinaryWithForward(t *testing.T) {
	dir := t.TempDir()
	// The shape of `coredns -plugins` in v1.15.0: one name a line.
	with := filepath.Join(dir, "with")
	writeExecutable(t, with, "#!/bin/sh\nprintf 'acl\\ncache\\nforward\\nhealth\\nkubernetes\\nready\\non\\n'\n")
	if err := checkCoreDNSPlugins(context.Background(), with); err == nil || !strings.Contains(err.Error(), "forward") {
		t.Errorf("a binary listing forward: err = %v, want one naming forward", err)
	}
	without := filepath.Join(dir, "without")
	writeExecutable(t, without, "#!/bin/sh\nprintf 'cache\\nerrors\\nhealth\\nkubernetes\\nloadbalance\\nlog\\nprometheus\\nready\\n'\n")
	if err := checkCoreDNSPlugins(context.Background(), without); err != nil {
		t.Errorf("a binary without forward failed the check: %v", err)
	}
	grpc := filepath.Join(dir, "grpc")
	writeExecutable(t, grpc, "#!/bin/sh\nprintf 'cache\\nerrors\\ngrpc\\nhealth\\nkubernetes\\nloadbalance\\nlog\\nready\\n'\n")
	if err := checkCoreDNSPlugins(context.Background(), grpc); err == nil || !strings.Contains(err.Error(), "grpc") {
		t.Errorf("a binary listing grpc: err = %v, want one naming grpc", err)
	}
	// A binary that is not CoreDNS (or lost the plugins the cluster needs).
	other := filepath.Join(dir, "other")
	writeExecutable(t, other, "#!/bin/sh\necho hello\n")
	if err := checkCoreDNSPlugins(context.Background(), other); err == nil {
		t.Error("a binary listing no kubernetes plugin passed the check")
	}
}

func TestShellJoin_QuotesWhatTheShellWouldSplit(t *testing.T) {
	got := shellJoin([]string{"build", "-ldflags", "-s -w -X a.b=c", "it's"})
	want := `build -ldflags '-s -w -X a.b=c' 'it'\''s'`
	if got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

func writeExecutable(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// writeModule writes a one-file main module (stdlib only) and returns its dir.
func writeModule(t *testing.T, mainGo string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.test/thing\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(mainGo), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// assertCacheHolds fails unless the cache directory holds exactly the given
// entries (slash-separated, relative), so leftovers of a build are caught.
func assertCacheHolds(t *testing.T, dir string, want ...string) {
	t.Helper()
	var got []string
	err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, path); rel != "." {
			got = append(got, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("cache holds %q, want %q", got, want)
	}
}
