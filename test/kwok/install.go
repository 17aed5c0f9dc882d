package kwok

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Version is kwok's module version that Install builds: the newest the Go
// module proxy serves (v0.6.1, v0.7.0, v0.8.0 on 2026-12-07).
const Version = "v0.8.0"

// Module is kwok's Go module; Install builds its cmd/kwok (the controller
// that fakes nodes and pods, and serves their exec), not kwokctl.
const Module = "sigs.k8s.io/kwok"

// ToolsDir is where Install keeps the binary: $KNOTLESS_TOOLS_DIR, else
// the user's cache directory's knotless/tools (~/.cache/knotless/tools),
// beside the tests' S3 server (internal/objstore/s3test).
func ToolsDir() (string, error) {
	if d := os.Getenv("KNOTLESS_TOOLS_DIR"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "knotless", "tools"), nil
}

// Install returns the path of kwok at Version, building it with `go
// install sigs.k8s.io/kwok/cmd/kwok@Version` (from the Go module proxy;
// CGO_ENABLED=0, -trimpath) when ToolsDir does not hold it yet. Concurrent
// callers, in one process or many, build it once (a flock). A cold build
// (empty module and build caches) took 371 s on this 2-core machine under
// load (docs/scaling.md). Errors: the go command's, with its output.
func Install() (string, error) {
	dir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kwok-"+Version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".kwok.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := lockFile(lock); err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another process built it meanwhile
	}
	gobin, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(gobin)
	cmd := exec.Command("go", "install", Module+"/cmd/kwok@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-buildvcs=false -trimpath", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s/cmd/kwok@%s: %v\n%s", Module, Version, err, out)
	}
	if err := os.Rename(filepath.Join(gobin, "kwok"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// ModuleDir returns the directory of kwok's module at Version in the Go
// module cache (`go mod download -json`), where its CRDs
// (kustomize/crd/bases) and stages (kustomize/stage) are. Errors: the go
// command's, with its output.
func ModuleDir() (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", Module+"@"+Version).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", Module, Version, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", Module, Version, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", Module, Version, m.Error)
	}
	return m.Dir, nil
}
