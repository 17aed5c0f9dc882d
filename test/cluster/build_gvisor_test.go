package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPatchRunscShim_RealModuleWrapsStartAndToleratesTheOOMScore(t *testing.T) {
	src := moduleSource(t, GVisorModule, GVisorVersion)
	if err := patchRunscShim(src); err != nil {
		t.Fatalf("patch: %v", err)
	}
	cli := readSource(t, src, "shim/v1/cli/cli.go")
	if !strings.Contains(cli, "knotlessPlainAddress(func() {\n\t\tcontainerdshim.Run(") {
		t.Errorf("cli.go does not run the shim inside knotlessPlainAddress:\n%s", cli)
	}
	manager := readSource(t, src, "pkg/shim/v1/manager.go")
	if !strings.Contains(manager, "err != nil && !os.IsPermission(err)") {
		t.Error("manager.go still fails the shim on a refused OOM score")
	}
	if strings.Count(manager, "sys.SetOOMScore(") != 1 {
		t.Errorf("manager.go sets the OOM score %d times, want once", strings.Count(manager, "sys.SetOOMScore("))
	}
	parseDir(t, filepath.Join(src, "shim", "v1", "cli"))
	parseDir(t, filepath.Join(src, "pkg", "shim", "v1"))
}

func TestPatchRunscShim_FailsWhenAppliedTwice(t *testing.T) {
	src := moduleSource(t, GVisorModule, GVisorVersion)
	if err := patchRunscShim(src); err != nil {
		t.Fatalf("first patch: %v", err)
	}
	err := patchRunscShim(src)
	if err == nil || !strings.Contains(err.Error(), "found 0 times") {
		t.Fatalf("second patch: err = %v, want one saying a snippet is gone", err)
	}
}

// The start action's output is what containerd 1.6 dials: the helper turns
// containerd 2's JSON bootstrap parameters into the plain address, and
// leaves every other action's output alone (delete prints a protobuf).
func TestRunscShimBootstrap_StartPrintsThePlainAddressContainerd16Dials(t *testing.T) {
	dir := t.TempDir()
	helper := strings.Replace(runscShimBootstrapSource, "package cli", "package main", 1)
	main := `package main

import "os"

func main() {
	knotlessPlainAddress(func() {
		os.Stdout.WriteString(os.Getenv("SHIM_OUTPUT"))
	})
}
`
	for name, content := range map[string]string{
		"go.mod":    "module example.test/shim\n\ngo 1.26\n",
		"helper.go": helper,
		"main.go":   main,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "shim")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir, build.Env = dir, buildEnv(false)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the helper: %v\n%s", err, out)
	}
	run := func(output string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "SHIM_OUTPUT="+output)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return stdout.String()
	}
	params := `{"version":2,"address":"unix:///run/containerd/s/0123abcd","protocol":"ttrpc"}`
	args := []string{"-namespace", "k8s.io", "-address", "/state/run/containerd.sock", "-publish-binary", "/usr/bin/containerd", "-id", "abc", "start"}
	if got := run(params, args...); got != "unix:///run/containerd/s/0123abcd" {
		t.Errorf("start printed %q, want the plain address", got)
	}
	// Not JSON (an older library's plain address): passed through.
	if got := run("unix:///run/containerd/s/ffff", args...); got != "unix:///run/containerd/s/ffff" {
		t.Errorf("start with a plain address printed %q", got)
	}
	args[len(args)-1] = "delete"
	if got := run(params, args...); got != params {
		t.Errorf("delete printed %q, want its output unchanged", got)
	}
}

// Pods of RuntimeClass gvisor reach runsc: the handler is in containerd's
// config with the shim's options file, which names the runsc Up links and
// the platform and seccomp settings; containerd finds the shim on its PATH.
func TestContainerdConfig_RunscHandlerForTheRuntimeClass(t *testing.T) {
	c := Config{StateDir: "/state"}
	cfg := c.containerdConfig()
	for _, want := range []string{
		`[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]`,
		`runtime_type = "io.containerd.runsc.v1"`,
		`TypeUrl = "io.containerd.runsc.v1.options"`,
		`ConfigPath = "/state/containerd/runsc.toml"`,
		`default_runtime_name = "runc"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, cfg)
		}
	}
	runsc := c.runscConfig()
	for _, want := range []string{`binary_name = "/state/bin/runsc"`, `root = "/state/run/runsc"`, `platform = "systrap"`, `oci-seccomp = "true"`} {
		if !strings.Contains(runsc, want) {
			t.Errorf("runsc.toml lacks %s:\n%s", want, runsc)
		}
	}
	var env []string
	for _, p := range c.processes() {
		if p.name == "containerd" {
			env = p.env
		}
	}
	if len(env) != 1 || !strings.HasPrefix(env[0], "PATH=/state/shims:/usr/local/sbin:") {
		t.Errorf("containerd's environment %v: want a PATH starting with /state/shims", env)
	}
	addons := c.addons()
	for _, want := range []string{"kind: RuntimeClass", "name: gvisor", "handler: runsc", "podFixed: {memory: 64Mi}"} {
		if !strings.Contains(addons, want) {
			t.Errorf("addons lack %q", want)
		}
	}
}

// The shim links land where containerd's PATH looks, runsc, runc,
// containerd and ctr beside the cluster's other programs.
func TestWriteLinks_RuntimesAndTheirShims(t *testing.T) {
	c := Config{StateDir: t.TempDir()}
	b := Binaries{Kube: "/c/kube", NetworkPolicies: "/c/np", CoreDNS: "/c/coredns", Runsc: "/c/g/runsc", RunscShim: "/c/g/containerd-shim-runsc-v1",
		Containerd: "/c/d/containerd", Ctr: "/c/d/ctr", RuncShim: "/c/d/containerd-shim-runc-v2", Runc: "/c/r/runc",
		Buildkitd: "/c/b/buildkitd", Buildctl: "/c/b/buildctl", Registry: "/c/reg/registry"}
	if err := c.writeLinks(b); err != nil {
		t.Fatal(err)
	}
	for link, want := range map[string]string{
		filepath.Join(c.StateDir, "bin", "runsc"):                      b.Runsc,
		filepath.Join(c.StateDir, "shims", "containerd-shim-runsc-v1"): b.RunscShim,
		filepath.Join(c.StateDir, "bin", "kubelet"):                    b.Kube,
		filepath.Join(c.StateDir, "bin", "containerd"):                 b.Containerd,
		filepath.Join(c.StateDir, "bin", "ctr"):                        b.Ctr,
		filepath.Join(c.StateDir, "bin", "runc"):                       b.Runc,
		filepath.Join(c.StateDir, "shims", "containerd-shim-runc-v2"):  b.RuncShim,
		filepath.Join(c.StateDir, "bin", "buildkitd"):                  b.Buildkitd,
		filepath.Join(c.StateDir, "bin", "buildctl"):                   b.Buildctl,
		filepath.Join(c.StateDir, "bin", "registry"):                   b.Registry,
	} {
		if got, err := os.Readlink(link); err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %s", link, got, err, want)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(c.StateDir, "shims")); len(ents) != 2 {
		t.Errorf("shims holds %d entries, want only the runc and runsc shims", len(ents))
	}
}

func TestCheckRunscVersion_RefusesAnUnstampedBinary(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	writeExecutable(t, bad, "#!/bin/sh\necho 'runsc version VERSION_MISSING'\necho 'spec: 1.2.1'\n")
	if err := checkRunscVersion(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "VERSION_MISSING") {
		t.Errorf("an unstamped runsc: err = %v, want one quoting its version", err)
	}
	good := filepath.Join(dir, "good")
	writeExecutable(t, good, "#!/bin/sh\necho 'runsc version "+GVisorVersion+"'\necho 'spec: 1.2.1'\n")
	if err := checkRunscVersion(context.Background(), good); err != nil {
		t.Errorf("a stamped runsc failed the check: %v", err)
	}
	if !strings.Contains(runscLDFlags(), "-X gvisor.dev/gvisor/runsc/version.version="+GVisorVersion) {
		t.Errorf("runscLDFlags %q does not stamp the version", runscLDFlags())
	}
}

// Up's smoke test of gVisor: a runsc that cannot start a sandbox is a
// warning naming its output (the cluster still serves every other test),
// one that can is logged as running.
func TestCheckRunsc_AFailingRunscIsAWarningWithItsOutput(t *testing.T) {
	var logs bytes.Buffer
	c := Config{StateDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logs, nil))}
	writeExecutable(t, c.bin("runsc"), "#!/bin/sh\necho 'cannot create sandbox: no platform' >&2\nexit 128\n")
	c.checkRunsc(context.Background())
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "cannot create sandbox: no platform") {
		t.Errorf("a failing runsc logged:\n%s", logs.String())
	}
	logs.Reset()
	writeExecutable(t, c.bin("runsc"), "#!/bin/sh\nexit 0\n")
	c.checkRunsc(context.Background())
	if !strings.Contains(logs.String(), "runsc runs a sandbox") {
		t.Errorf("a working runsc logged:\n%s", logs.String())
	}
}

// TestRunsc_RunsASandboxOnThisMachine: gVisor runs on this kind of
// machine at all: the cached runsc starts a sandbox on the systrap
// platform (no /dev/kvm, no ptrace needed) and runs a program in it, which
// sees gVisor's kernel. It pins a runsc that cannot run a sandbox here.
// Needs root and the binary `make cluster-build` caches; skipped without
// them, failed instead with KNOTLESS_TEST_CLUSTER_REQUIRED=1.
func TestRunsc_RunsASandboxOnThisMachine(t *testing.T) {
	b, _ := CachedBinaries(BuildOptions{CacheDir: os.Getenv(CacheDirEnv)})
	if os.Geteuid() != 0 || !isExecutable(b.Runsc) {
		msg := "needs root and " + b.Runsc + " (make cluster-build)"
		if os.Getenv("KNOTLESS_TEST_CLUSTER_REQUIRED") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.Runsc, "--root", t.TempDir(), "--platform", "systrap", "--network", "none", "do", "/bin/uname", "-r")
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("runsc do uname -r: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); !strings.Contains(got, "gvisor") {
		t.Errorf("uname -r in the sandbox = %q, want gVisor's kernel", got)
	}
}

// A runc built without libseccomp would refuse every pod's RuntimeDefault
// profile at start; the build's check refuses it in the cache instead.
func TestCheckRunc_RefusesOneWithoutSeccomp(t *testing.T) {
	dir := t.TempDir()
	v := strings.TrimPrefix(RuncVersion, "v")
	bad := filepath.Join(dir, "bad")
	writeExecutable(t, bad, "#!/bin/sh\necho 'runc version "+v+"'\necho 'spec: 1.3.0'\necho 'go: go1.26'\n")
	if err := checkRunc(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "libseccomp") {
		t.Errorf("a runc without libseccomp: err = %v, want one naming libseccomp", err)
	}
	good := filepath.Join(dir, "good")
	writeExecutable(t, good, "#!/bin/sh\necho 'runc version "+v+"'\necho 'spec: 1.3.0'\necho 'libseccomp: 2.5.4'\n")
	if err := checkRunc(context.Background(), good); err != nil {
		t.Errorf("a runc with libseccomp: %v", err)
	}
}
