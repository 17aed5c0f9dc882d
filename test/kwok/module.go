package kwok

import (
	"encoding/json"
	"fmt"
	"os/exec"
)

// Version is kwok's module version: the one test/cluster/kube/go.mod
// requires, whose cmd/kwok main the local cluster's multi-call binary
// holds (KubeBinary, argv[0] "kwok"). ModuleDir reads the CRDs and stages
// of this version. TestVersion_IsTheOneTheClusterBinaryIsBuiltWith keeps
// the two equal.
const Version = "v0.8.0"

// Module is kwok's Go module.
const Module = "sigs.k8s.io/kwok"

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
