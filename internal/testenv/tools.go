package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
)

// ToolsDir is where InstallGoTool keeps the tools the tests build (the S3
// server, kwok): $KNOTLESS_TOOLS_DIR, else the user's cache directory's
// knotless/tools (~/.cache/knotless/tools), outside any work tree so that
// a clean clone reuses them.
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

// InstallGoTool returns the path of the command pkg (a Go package path,
// e.g. sigs.k8s.io/kwok/cmd/kwok) at module version version, kept in
// ToolsDir as NAME-VERSION (NAME the package's last element). When it is
// not there yet it builds it with `go install pkg@version` (from the Go
// module proxy; CGO_ENABLED=0, -trimpath). Concurrent callers, in one
// process or many, build it once (a flock of ToolsDir/.NAME.lock).
// Errors: the go command's, with its output.
func InstallGoTool(pkg, version string) (string, error) {
	dir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	name := path.Base(pkg)
	bin := filepath.Join(dir, name+"-"+version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "."+name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
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
	cmd := exec.Command("go", "install", pkg+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-buildvcs=false -trimpath", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %v\n%s", pkg, version, err, out)
	}
	if err := os.Rename(filepath.Join(gobin, name), bin); err != nil {
		return "", err
	}
	return bin, nil
}
