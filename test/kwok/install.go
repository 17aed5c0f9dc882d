package kwok

import (
	"encoding/json"
	"fmt"
	"os/exec"

	"knotless.dev/knotless/internal/testenv"
)

// Version is kwok's module version that Install builds: the newest the Go
// module proxy serves (v0.6.1, v0.7.0, v0.8.0 on 2026-12-07).
const Version = "v0.8.0"

// Module is kwok's Go module; Install builds its cmd/kwok (the controller
// that fakes nodes and pods, and serves their exec), not kwokctl.
const Module = "sigs.k8s.io/kwok"

// ToolsDir is where Install keeps the binary (testenv.ToolsDir), beside
// the tests' S3 server (internal/objstore/s3test).
func ToolsDir() (string, error) { return testenv.ToolsDir() }

// Install returns the path of kwok at Version, building its cmd/kwok with
// `go install` (from the Go module proxy) when ToolsDir does not hold it
// yet, once across processes (testenv.InstallGoTool). A cold build (empty
// module and build caches) took 371 s on this 2-core machine under load
// (docs/scaling.md). Errors: the go command's, with its output.
func Install() (string, error) { return testenv.InstallGoTool(Module+"/cmd/kwok", Version) }

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
