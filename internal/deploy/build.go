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
	"strings"
)

// Programs are the files the init container installs, in the order it
// fetches them.
var Programs = []string{"knotless-run", "knotless-agent"}

// Build compiles Programs from the module at moduleRoot into outDir with
// the one command the manifests' digests are made from: CGO_ENABLED=0 (so
// the files run on any libc, musl included), -trimpath, -ldflags "-s -w",
// GOFLAGS=-buildvcs=false. The same source and Go toolchain give the same
// bytes. It returns the paths by program name. Errors: the go command's
// output.
func Build(ctx context.Context, moduleRoot, outDir string) (map[string]string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go"
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", outDir + string(filepath.Separator)}
	for _, p := range Programs {
		args = append(args, "./cmd/"+p)
	}
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	paths := map[string]string{}
	for _, p := range Programs {
		paths[p] = filepath.Join(outDir, p)
	}
	return paths, nil
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
