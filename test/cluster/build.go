package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Versions of the binaries the harness builds, beside KubernetesVersion (the
// release the kube/ module pins). A change here changes the cache directory
// names, so a machine rebuilds exactly what changed.
const (
	// NetworkPoliciesModule and NetworkPoliciesVersion name the NetworkPolicy
	// enforcer's module as the Go module proxy serves it.
	NetworkPoliciesModule  = "sigs.k8s.io/kube-network-policies"
	NetworkPoliciesVersion = "v0.8.0"
	// CoreDNSModule and CoreDNSVersion name CoreDNS's module.
	CoreDNSModule  = "github.com/coredns/coredns"
	CoreDNSVersion = "v1.15.0"
	// NetworkPoliciesPatchLevel and CoreDNSPatchLevel name the revisions of
	// our build-time changes to the two upstream modules (build_patch.go).
	// Bump one whenever its patch changes, so cached binaries built with the
	// old patches are not reused (and the other is not rebuilt).
	NetworkPoliciesPatchLevel = "knotless2"
	CoreDNSPatchLevel         = "knotless2"
	// KubeModuleLevel names the revision of the kube/ module's programs
	// and requirements beyond Kubernetes' own (knotless1: kwok joined
	// them). Bump it whenever kube/main.go's programs or kube/go.mod's
	// other requirements change, so a cached binary without them is not
	// reused.
	KubeModuleLevel = "knotless1"
	// GVisorModule and GVisorVersion name gVisor's module: gVisor tags no
	// module versions; the module proxy serves its `go` branch (the Go
	// source the project generates from its Bazel tree) as pseudo-versions.
	// runsc and containerd-shim-runsc-v1 are built from it.
	GVisorModule  = "gvisor.dev/gvisor"
	GVisorVersion = "v0.0.0-20260905035102-160fafc42237"
	// GVisorPatchLevel names the revision of our build-time changes to the
	// runsc shim (build_patch.go); runsc itself is built unchanged.
	GVisorPatchLevel = "knotless1"
	// ContainerdModule and ContainerdVersion name containerd's module:
	// containerd, ctr and containerd-shim-runc-v2 are built from it,
	// unchanged.
	ContainerdModule  = "github.com/containerd/containerd/v2"
	ContainerdVersion = "v2.4.2"
	// RuncModule and RuncVersion name runc's module (built unchanged, with
	// cgo and libseccomp: BuildPackages).
	RuncModule  = "github.com/opencontainers/runc"
	RuncVersion = "v1.5.3"

	// BuildKit's daemon and client, the builder of container builds
	// (the builder image, BuilderImage). Built inside the module: its
	// go.mod's exclude directives make `go install pkg@version` refuse.
	BuildKitModule  = "github.com/moby/buildkit"
	BuildKitVersion = "v0.34.2"

	// The registry the tests push built images to and pull them from
	// (distribution's reference implementation).
	DistributionModule  = "github.com/distribution/distribution/v3"
	DistributionVersion = "v3.1.2"
)

// BuildOptions configures Build and CachedBinaries.
type BuildOptions struct {
	// CacheDir is where binaries are kept, one directory per component and
	// version (<CacheDir>/kubernetes-v1.37.2-knotless1/kube). Default DefaultCacheDir.
	CacheDir string
	// SourceDir is the test/cluster directory of the work tree; its kube/
	// subdirectory is the module of the multi-call Kubernetes binary. Needed
	// only when that binary must be built.
	SourceDir string
	// Log receives one line per build event (start with the command, end with
	// duration and size). Default slog.Default().
	Log *slog.Logger
	// Only, when set, builds only the binaries of these names (the first
	// word of a build line's name: buildkitd, buildctl, runc, ...); the
	// others are neither built nor required.
	Only []string
}

// Binaries holds absolute paths of the cluster's binaries in the cache.
type Binaries struct {
	// Kube is the multi-call binary: kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet, kube-proxy, kubectl, etcd and kwok (for the
	// scale benchmark's simulated cluster, test/kwok), picked by argv[0] or
	// by the first argument.
	Kube string
	// NetworkPolicies is kube-network-policies with our build-time changes: it
	// queues packets through the x_tables NFQUEUE target and reads KUBECONFIG.
	NetworkPolicies string
	// CoreDNS is CoreDNS with only the plugins our Corefile uses
	// (CoreDNSPlugins): no forward plugin.
	CoreDNS string
	// Runsc is gVisor's OCI runtime (the handler of RuntimeClass gvisor).
	Runsc string
	// RunscShim is containerd-shim-runsc-v1, containerd's shim for runsc,
	// with our changes (patchRunscShim).
	RunscShim string
	// Containerd, Ctr and RuncShim are containerd's daemon, its client and
	// its shim for runc (containerd-shim-runc-v2).
	Containerd, Ctr, RuncShim string
	// Runc is the OCI runtime of every pod but gVisor's.
	Runc string
	// Buildkitd and Buildctl are BuildKit's daemon and client, for the
	// builder image.
	Buildkitd, Buildctl string
	// Registry is distribution's registry, the tests' registry.
	Registry string
}

func (o BuildOptions) withDefaults() BuildOptions {
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// paths returns where each binary lives in the cache, present or not.
func (o BuildOptions) paths() Binaries {
	o = o.withDefaults()
	dir, _ := filepath.Abs(o.CacheDir)
	return Binaries{
		Kube:            filepath.Join(dir, "kubernetes-"+KubernetesVersion+"-"+KubeModuleLevel, "kube"),
		NetworkPolicies: filepath.Join(dir, "kube-network-policies-"+NetworkPoliciesVersion+"-"+NetworkPoliciesPatchLevel, "kube-network-policies"),
		CoreDNS:         filepath.Join(dir, "coredns-"+CoreDNSVersion+"-"+CoreDNSPatchLevel, "coredns"),
		Runsc:           filepath.Join(dir, gvisorDir, "runsc"),
		RunscShim:       filepath.Join(dir, gvisorDir, "containerd-shim-runsc-v1"),
		Containerd:      filepath.Join(dir, containerdDir, "containerd"),
		Ctr:             filepath.Join(dir, containerdDir, "ctr"),
		RuncShim:        filepath.Join(dir, containerdDir, "containerd-shim-runc-v2"),
		Runc:            filepath.Join(dir, "runc-"+RuncVersion, "runc"),
		Buildkitd:       filepath.Join(dir, buildkitDir, "buildkitd"),
		Buildctl:        filepath.Join(dir, buildkitDir, "buildctl"),
		Registry:        filepath.Join(dir, "distribution-"+DistributionVersion, "registry"),
	}
}

// buildkitDir is the cache directory of BuildKit's binaries.
const buildkitDir = "buildkit-" + BuildKitVersion

// containerdDir is the cache directory of containerd's binaries.
const containerdDir = "containerd-" + ContainerdVersion

// gvisorDir is the cache directory of runsc and its shim.
const gvisorDir = "gvisor-" + GVisorVersion + "-" + GVisorPatchLevel

// all lists every binary's path.
func (b Binaries) all() []string {
	return []string{b.Kube, b.NetworkPolicies, b.CoreDNS, b.Runsc, b.RunscShim, b.Containerd, b.Ctr, b.RuncShim, b.Runc, b.Buildkitd, b.Buildctl, b.Registry}
}

// CachedBinaries returns the binaries' paths and true when all of them are
// present in the cache as executable files. It never builds.
func CachedBinaries(o BuildOptions) (Binaries, bool) {
	b := o.paths()
	for _, p := range b.all() {
		if !isExecutable(p) {
			return b, false
		}
	}
	return b, true
}

// Build builds every binary missing from the cache and returns the paths of
// all of them. Binaries already present are not rebuilt.
//
// The binaries build at once in three lines (buildLines): Kubernetes;
// runsc then its shim (the shim reuses runsc's compiled gVisor packages
// from the go build cache, so the two never compile them twice at once),
// then containerd, ctr, containerd-shim-runc-v2, runc and the registry;
// kube-network-policies, CoreDNS, then BuildKit's buildkitd and buildctl
// (for the builder image). One go build leaves a core idle for
// long stretches (its links, its dependency graph's narrow parts); the
// others fill them. The first failure cancels the other builds.
//
// Each binary is written under a temporary name in the cache and renamed into
// place only after it built (and, for CoreDNS, passed its check), so a failed
// or cancelled build leaves nothing in the cache. Concurrent calls on one cache
// directory are serialised by a lock file (<CacheDir>/.build.lock). The go
// command is the one on PATH. Cancelling ctx interrupts the running go
// commands. A cold build of all of them took 14 minutes on 2 cores beside
// make build (a cold CI run on AMD EPYC: Kubernetes 13m44s;
// kube-network-policies 5m47s then CoreDNS 2m18s; runsc 4m45s then the
// shim 1m16s; containerd, added since, 3m24s and runc 29s in the second
// line, which still ends before Kubernetes), and about twice that on a
// slower 2-core machine.
func Build(ctx context.Context, o BuildOptions) (Binaries, error) {
	o = o.withDefaults()
	b := o.paths()
	if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
		return b, fmt.Errorf("create binary cache %s: %w", o.CacheDir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(o.CacheDir, ".build.lock"), o.Log)
	if err != nil {
		return b, err
	}
	defer unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := buildLines(b)
	errs := make([]error, len(lines))
	var wg sync.WaitGroup
	for i, line := range lines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, s := range line {
				if len(o.Only) > 0 && !slices.Contains(o.Only, strings.Fields(s.name)[0]) {
					continue
				}
				if isExecutable(s.path) {
					o.Log.Info("binary cached", "component", s.name, "path", s.path)
					continue
				}
				if err := s.build(ctx, o, s.path); err != nil {
					errs[i] = fmt.Errorf("build %s: %w", s.name, err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	// The first failure is the one to report; the others are its
	// cancellation.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return b, err
		}
	}
	return b, errors.Join(errs...)
}

// buildStep is one binary of the cluster: its name for logs, its path in
// the cache and how to build it there.
type buildStep struct {
	name, path string
	build      func(context.Context, BuildOptions, string) error
}

// buildLines returns the builds of Build, in lines that run at once; each
// line's steps run one after another.
func buildLines(b Binaries) [][]buildStep {
	return [][]buildStep{
		{{"kubernetes " + KubernetesVersion, b.Kube, buildKube}},
		{
			{"runsc " + GVisorVersion, b.Runsc, buildRunsc},
			{"containerd-shim-runsc-v1 " + GVisorVersion, b.RunscShim, buildRunscShim},
			{"containerd " + ContainerdVersion, b.Containerd, buildStamped(ContainerdModule, ContainerdVersion, "/version.Version", "./cmd/containerd")},
			{"ctr " + ContainerdVersion, b.Ctr, buildStamped(ContainerdModule, ContainerdVersion, "/version.Version", "./cmd/ctr")},
			{"containerd-shim-runc-v2 " + ContainerdVersion, b.RuncShim, buildStamped(ContainerdModule, ContainerdVersion, "/version.Version", "./cmd/containerd-shim-runc-v2")},
			{"runc " + RuncVersion, b.Runc, buildRunc},
			{"registry " + DistributionVersion, b.Registry, buildStamped(DistributionModule, DistributionVersion, "/version.version", "./cmd/registry")},
		},
		{
			{"kube-network-policies " + NetworkPoliciesVersion, b.NetworkPolicies, buildNetworkPolicies},
			{"coredns " + CoreDNSVersion, b.CoreDNS, buildCoreDNS},
			{"buildkitd " + BuildKitVersion, b.Buildkitd, buildStamped(BuildKitModule, BuildKitVersion, "/version.Version", "./cmd/buildkitd")},
			{"buildctl " + BuildKitVersion, b.Buildctl, buildStamped(BuildKitModule, BuildKitVersion, "/version.Version", "./cmd/buildctl")},
		},
	}
}

// kubeLDFlags returns the -ldflags of the multi-call binary: stripped, with
// the version variables that components report (without them they say
// v0.0.0). The string must stay byte-identical across builds, since the go
// build cache keys the link on it. buildDate is fixed for the same reason.
func kubeLDFlags(version string) string {
	major, minor := "", ""
	if parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3); len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range [][2]string{
			{"gitMajor", major},
			{"gitMinor", minor},
			{"gitVersion", version},
			{"gitCommit", version},
			{"gitTreeState", "clean"},
			{"buildDate", "2026-01-01T00:00:00Z"},
		} {
			flags = append(flags, "-X", pkg+"."+kv[0]+"="+kv[1])
		}
	}
	return strings.Join(flags, " ")
}

// buildEnv is the environment of every go command of the build step. CGO is
// off so the binaries are static (on only for runc, which links statically
// itself: cgoSetting); VCS stamping is off because the sources are
// module copies (and the kube build must match the cache keys of earlier
// builds). GOFLAGS is replaced, not extended, so a caller's flags (-mod=vendor,
// -race) cannot change what is built.
func buildEnv(cgo bool) []string {
	env := make([]string, 0, len(os.Environ())+4)
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "CGO_ENABLED", "GOFLAGS", "GOWORK", "GOTOOLCHAIN":
			continue
		}
		env = append(env, kv)
	}
	return append(env, cgoSetting(cgo), buildGOFLAGS, "GOWORK=off", "GOTOOLCHAIN=local")
}

// buildGOFLAGS is the GOFLAGS of buildEnv.
const buildGOFLAGS = "GOFLAGS=-buildvcs=false"

// cgoSetting is buildEnv's CGO_ENABLED entry.
func cgoSetting(cgo bool) string {
	if cgo {
		return "CGO_ENABLED=1"
	}
	return "CGO_ENABLED=0"
}

func buildKube(ctx context.Context, o BuildOptions, out string) error {
	if o.SourceDir == "" {
		return errors.New("BuildOptions.SourceDir is empty: set it to the test/cluster directory of the work tree")
	}
	dir := filepath.Join(o.SourceDir, "kube")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return fmt.Errorf("find the kube module: %w", err)
	}
	return goBuild(ctx, o, dir, ".", []string{gcflagsNoDWARFNoInlines, "-trimpath", "-ldflags", kubeLDFlags(KubernetesVersion)}, out, nil)
}

func buildNetworkPolicies(ctx context.Context, o BuildOptions, out string) error {
	src, cleanup, err := moduleCopy(ctx, o, NetworkPoliciesModule, NetworkPoliciesVersion)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := patchNetworkPolicies(src); err != nil {
		return err
	}
	return goBuild(ctx, o, src, "./cmd", []string{gcflagsNoDWARFNoInlines, "-trimpath", "-ldflags", "-s -w"}, out, nil)
}

func buildCoreDNS(ctx context.Context, o BuildOptions, out string) error {
	src, cleanup, err := moduleCopy(ctx, o, CoreDNSModule, CoreDNSVersion)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := patchCoreDNS(src); err != nil {
		return err
	}
	return goBuild(ctx, o, src, ".", []string{gcflagsNoDWARFNoInlines, "-trimpath", "-ldflags", "-s -w"}, out, checkCoreDNSPlugins)
}

// runscLDFlags strips runsc and stamps the version it reports (without it,
// `runsc --version` says VERSION_MISSING).
func runscLDFlags() string {
	return "-s -w -X gvisor.dev/gvisor/runsc/version.version=" + GVisorVersion
}

// buildRunsc builds runsc unchanged, in the module cache's read-only copy
// of gVisor (go build writes only its output there).
func buildRunsc(ctx context.Context, o BuildOptions, out string) error {
	src, err := moduleDir(ctx, GVisorModule, GVisorVersion)
	if err != nil {
		return err
	}
	return goBuild(ctx, o, src, "./runsc", []string{gcflagsNoDWARF, "-trimpath", "-ldflags", runscLDFlags()}, out, checkRunscVersion)
}

// buildRunscShim builds containerd-shim-runsc-v1 from a copy of gVisor with
// our changes (patchRunscShim).
func buildRunscShim(ctx context.Context, o BuildOptions, out string) error {
	src, cleanup, err := moduleCopy(ctx, o, GVisorModule, GVisorVersion)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := patchRunscShim(src); err != nil {
		return err
	}
	return goBuild(ctx, o, src, "./shim", []string{gcflagsNoDWARF, "-trimpath", "-ldflags", "-s -w"}, out, checkRunscShim)
}

// buildStamped returns the build of command pkg (e.g. ./cmd/ctr) of
// module at version, in the module cache's read-only copy: static (no
// cgo), its version variable (versionVar, e.g. /version.Version, below the
// module's path) set to version, and `--version` checked to name it.
// Commands of one module share their compiled packages through the go
// build cache. It serves containerd, BuildKit and distribution's registry.
func buildStamped(module, version, versionVar, pkg string) func(context.Context, BuildOptions, string) error {
	return func(ctx context.Context, o BuildOptions, out string) error {
		src, err := moduleDir(ctx, module, version)
		if err != nil {
			return err
		}
		ld := "-s -w -X " + module + versionVar + "=" + version
		return goBuild(ctx, o, src, pkg, []string{gcflagsNoDWARF, "-trimpath", "-ldflags", ld}, out, checkVersion(version))
	}
}

// buildRunc builds runc with cgo (its nsenter is C) and seccomp (without
// it runc refuses every seccomp profile, RuntimeDefault included), linked
// statically; netgo and osusergo keep glibc's NSS out of it. The packages
// it needs (BuildPackages) are installed first if missing.
func buildRunc(ctx context.Context, o BuildOptions, out string) error {
	if err := ensureThesePackages(ctx, o.Log, BuildPackages); err != nil {
		return fmt.Errorf("runc's build packages: %w", err)
	}
	src, err := moduleDir(ctx, RuncModule, RuncVersion)
	if err != nil {
		return err
	}
	ld := "-s -w -X main.version=" + strings.TrimPrefix(RuncVersion, "v") + " -extldflags -static"
	return goBuildCgo(ctx, o, src, ".", []string{gcflagsNoDWARF, "-trimpath", "-tags", "seccomp netgo osusergo urfave_cli_no_docs", "-ldflags", ld},
		true, out, checkRunc)
}

// checkVersion returns a check that runs `BIN --version` and refuses a
// binary whose output lacks any of wants.
func checkVersion(wants ...string) func(context.Context, string) error {
	return func(ctx context.Context, bin string) error {
		out, err := exec.CommandContext(ctx, bin, "--version").Output()
		if err != nil {
			return fmt.Errorf("run %s --version: %w", bin, err)
		}
		for _, want := range wants {
			if !strings.Contains(string(out), want) {
				return fmt.Errorf("%s --version says %q, want %q", bin, strings.TrimSpace(string(out)), want)
			}
		}
		return nil
	}
}

// checkRunc refuses a runc that does not report RuncVersion or was built
// without libseccomp.
var checkRunc = checkVersion("runc version "+strings.TrimPrefix(RuncVersion, "v"), "libseccomp: ")

// checkRunscVersion refuses a runsc that does not report GVisorVersion.
var checkRunscVersion = checkVersion("runsc version " + GVisorVersion)

// checkRunscShim refuses a shim that does not start (`-v` prints its
// version and exits 0).
func checkRunscShim(ctx context.Context, bin string) error {
	if out, err := exec.CommandContext(ctx, bin, "-v").CombinedOutput(); err != nil {
		return fmt.Errorf("run %s -v: %w: %s", bin, err, out)
	}
	return nil
}

// checkCoreDNSPlugins refuses a CoreDNS binary that lists a plugin that
// sends queries elsewhere (forward, grpc): no DNS query of a test may leave
// the machine; or that lacks one of CoreDNSPlugins. `coredns -plugins`
// prints one plugin name a line (older releases prefixed them with "dns.").
func checkCoreDNSPlugins(ctx context.Context, bin string) error {
	out, err := exec.CommandContext(ctx, bin, "-plugins").Output()
	if err != nil {
		return fmt.Errorf("run %s -plugins: %w", bin, err)
	}
	listed := map[string]bool{}
	for _, name := range strings.Fields(string(out)) {
		listed[strings.TrimPrefix(name, "dns.")] = true
	}
	for _, egress := range []string{"forward", "grpc"} {
		if listed[egress] {
			return fmt.Errorf("%s -plugins still lists the %s plugin", bin, egress)
		}
	}
	for _, want := range CoreDNSPlugins {
		if !listed[want] {
			return fmt.Errorf("%s -plugins does not list %s; output:\n%s", bin, want, out)
		}
	}
	return nil
}

// Compiler flags of the cluster's builds (go build -gcflags, for every
// package of the binary, the standard library's included).
//
// No DWARF anywhere: every binary is linked stripped (-s -w), so the
// compiler's debug information would be made only to be thrown away;
// skipping it saves about 6% of the CPU time (a cold arm64 build of
// knotless-run and knotless-agent: 359 against 383 CPU-seconds). Stack
// traces do not need it (they read the pclntab).
//
// No inlining (-l) in Kubernetes, kube-network-policies and CoreDNS:
// the compiler spends a sixth of its time less (k8s.io/client-go/kubernetes
// and k8s.io/kubernetes/pkg/apis/core/v1 from cold, standard library
// cached: 149 against 177 CPU-seconds), and these are test programs, idle
// most of the time, where a slower call costs less than the minutes a
// cold build takes. gVisor keeps its inlining: its sandbox carries every
// system call of a gVisor job pod, so the gVisor suite would pay for each
// call made slower, and it is built as its own releases are.
const (
	gcflagsNoDWARF          = "-gcflags=all=-dwarf=false"
	gcflagsNoDWARFNoInlines = "-gcflags=all=-dwarf=false -l"
)

// goBuild runs `go build <flags> -o <tmp> <pkg>` in dir, checks the result
// with check (when not nil), and renames it to out. Output of the go command
// is kept and its end returned in the error when the build fails.
func goBuild(ctx context.Context, o BuildOptions, dir, pkg string, flags []string, out string,
	check func(context.Context, string) error) error {
	return goBuildCgo(ctx, o, dir, pkg, flags, false, out, check)
}

// goBuildCgo is goBuild with cgo on when cgo is true.
func goBuildCgo(ctx context.Context, o BuildOptions, dir, pkg string, flags []string, cgo bool, out string,
	check func(context.Context, string) error) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find the go command on PATH: %w", err)
	}
	// The temporary directory is inside the cache, so the final rename stays
	// on one file system; go build refuses to overwrite a file that is not an
	// executable, hence a directory rather than a temporary file.
	tmpDir, err := os.MkdirTemp(filepath.Dir(filepath.Dir(out)), ".build-")
	if err != nil {
		return fmt.Errorf("create temporary build directory: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, filepath.Base(out))

	args := append(append([]string{"build"}, flags...), "-o", tmp, pkg)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = buildEnv(cgo)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	// An interrupted go command removes its temporary work directory; a
	// killed one would not.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second

	o.Log.Info("build start", "binary", out, "dir", dir,
		"command", cgoSetting(cgo)+" "+buildGOFLAGS+" "+goBin+" "+shellJoin(args))
	start := time.Now()
	if err := cmd.Run(); err != nil {
		o.Log.Error("build failed", "binary", out, "duration", time.Since(start).Round(time.Second).String(), "error", err)
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, lastBytes(output.Bytes(), 8<<10))
	}
	if check != nil {
		if err := check(ctx, tmp); err != nil {
			return fmt.Errorf("check built %s: %w", filepath.Base(out), err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(out), err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("move built binary into the cache: %w", err)
	}
	var size int64
	if fi, err := os.Stat(out); err == nil {
		size = fi.Size()
	}
	o.Log.Info("build done", "binary", out, "duration", time.Since(start).Round(time.Second).String(),
		"size_mib", fmt.Sprintf("%.1f", float64(size)/(1<<20)))
	return nil
}

// moduleCopy downloads module@version through the go command (the module
// proxy; nothing is fetched when the module cache has it) and copies its
// source into a new temporary directory with writable files, so patches can
// be applied. cleanup removes the copy.
func moduleCopy(ctx context.Context, o BuildOptions, module, version string) (dir string, cleanup func(), err error) {
	src, err := moduleDir(ctx, module, version)
	if err != nil {
		return "", nil, err
	}
	dir, err = os.MkdirTemp("", "knotless-src-"+filepath.Base(module)+"-")
	if err != nil {
		return "", nil, fmt.Errorf("create source copy directory: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	if err := copyTree(src, dir); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("copy %s@%s source: %w", module, version, err)
	}
	o.Log.Info("module source copied", "module", module+"@"+version, "from", src, "to", dir)
	return dir, cleanup, nil
}

// moduleDir returns the module cache directory of module@version, running
// `go mod download -json` to fill it if needed.
func moduleDir(ctx context.Context, module, version string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("find the go command on PATH: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", module+"@"+version)
	// Outside any module, so no go.mod around the caller is consulted.
	cmd.Dir = os.TempDir()
	cmd.Env = buildEnv(false)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || runErr != nil || info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("download %s@%s: %v %s %s", module, version, errors.Join(runErr, err), info.Error,
			strings.TrimSpace(stderr.String()))
	}
	return info.Dir, nil
}

// copyTree copies the regular files and directories under src into dst (which
// exists). Files become owner-writable; the module cache's are read-only.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, info.Mode().Perm()|0o200)
		default:
			return fmt.Errorf("%s: not a regular file or directory (%s)", path, d.Type())
		}
	})
}

// lockFile takes an exclusive flock on path, waiting until it is free or ctx
// ends. The returned function releases it.
func lockFile(ctx context.Context, path string, log *slog.Logger) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open build lock %s: %w", path, err)
	}
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !logged {
			log.Info("waiting for another build of the cluster binaries", "lock", path)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for build lock %s: %w", path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// shellJoin quotes args for a log line a person can paste into a shell.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
