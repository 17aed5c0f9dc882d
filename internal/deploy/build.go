package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Arches are the Linux architectures of a release, as GOARCH names them
// (Machines maps `uname -m` to them: x86_64 → amd64, aarch64 → arm64).
var Arches = []string{"amd64", "arm64"}

// Machines maps what `uname -m` says on a host of each of Arches to that
// architecture. The two shell scripts that pick a release's files by it,
// the runner pod's init container (deploy/kubernetes/base/deployment.yaml)
// and install.sh (internal/server/install.sh), each write it as a case
// statement; TestMachines_ScriptsMapUnameAsDeployDoes holds both to it.
var Machines = map[string]string{"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

// Programs are what the manifests' init container installs, each for
// every one of Arches: the runner and the step agent.
var Programs = []string{"knotless-run", "knotless-agent"}

// ReleasePrograms are every program of a release (directories under
// cmd/): Programs, the server and the CLI.
var ReleasePrograms = []string{"knotless-run", "knotless-agent", "knotless-server", "knotless"}

// FileName is the name of program built for linux/arch in a release, in
// the runner image and at KNOTLESS_DOWNLOAD_URL, e.g.
// "knotless-run-linux-arm64".
func FileName(program, arch string) string {
	return program + "-linux-" + arch
}

// BuildEnv is what every build adds to the environment: static (no cgo,
// so the files run on any libc, musl included), linux/arch, no VCS stamp,
// and the architecture's baseline instruction set (a GOAMD64, GOARM64 or
// GOFLAGS of the caller's would change the bytes). The Makefile's build
// sets the same.
func BuildEnv(arch string) []string {
	return []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch, "GOFLAGS=-buildvcs=false", "GOAMD64=v1", "GOARM64=v8.0"}
}

// Build compiles programs (names under cmd/) of the module at moduleRoot
// for linux/arch into outDir, each as FileName(program, arch), with
// BuildEnv and `go build -trimpath -ldflags LDFlags(VERSION)`: the command
// the manifests' digests are made from. The same source, VERSION and Go
// release give the same bytes, wherever the checkout is. Each file appears
// whole (built beside it, then renamed), so a server serving outDir never
// hands out half of one. It returns the paths by file name. Errors:
// ReadVersion's, an unknown arch, the go command's output.
func Build(ctx context.Context, moduleRoot, outDir, arch string, programs ...string) (map[string]string, error) {
	if !slices.Contains(Arches, arch) {
		return nil, fmt.Errorf("build for linux/%s: a release has %s only", arch, strings.Join(Arches, " and "))
	}
	version, err := ReadVersion(moduleRoot)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(outDir, ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-trimpath", "-ldflags", LDFlags(version), "-o", tmp + string(filepath.Separator)}
	for _, p := range programs {
		args = append(args, "./cmd/"+p)
	}
	cmd := exec.CommandContext(ctx, goCommand(), args...)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), BuildEnv(arch)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s go %s: %w\n%s", strings.Join(BuildEnv(arch), " "), strings.Join(args, " "), err, out)
	}
	paths := map[string]string{}
	for _, p := range programs {
		dst := filepath.Join(outDir, FileName(p, arch))
		if err := os.Rename(filepath.Join(tmp, p), dst); err != nil {
			return nil, err
		}
		paths[FileName(p, arch)] = dst
	}
	return paths, nil
}

// BuildAll is Build for every one of Arches, its paths by file name.
func BuildAll(ctx context.Context, moduleRoot, outDir string, programs ...string) (map[string]string, error) {
	all := map[string]string{}
	for _, arch := range Arches {
		paths, err := Build(ctx, moduleRoot, outDir, arch, programs...)
		if err != nil {
			return nil, err
		}
		for name, p := range paths {
			all[name] = p
		}
	}
	return all, nil
}

// GoVersion is the release of the go command Build uses, e.g. "go1.26.8":
// a part of what makes the bytes.
func GoVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, goCommand(), "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// goCommand is the go command: in PATH, else where the Go installer puts it.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// FileDigest returns the SHA-256 of the file at path, lower-case hex (64
// characters), as sha256sum prints it.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// FileDigests is FileDigest of every file of paths (by file name, as Build
// returns them), by the same names.
func FileDigests(paths map[string]string) (map[string]string, error) {
	digests := map[string]string{}
	for name, p := range paths {
		d, err := FileDigest(p)
		if err != nil {
			return nil, err
		}
		digests[name] = d
	}
	return digests, nil
}

// ModuleRoot walks up from dir to the directory holding go.mod.
func ModuleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}
