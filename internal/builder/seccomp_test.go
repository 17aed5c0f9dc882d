package builder_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"knotless.dev/knotless/internal/builder"
)

// TestSeccompProfileIsTheDeployedOne pins the embedded copy to
// deploy/kubernetes/builds/builder-seccomp.json, the one source of the
// builder's seccomp profile: a docker runner must hand its builders the
// profile kube nodes have, byte for byte.
func TestSeccompProfileIsTheDeployedOne(t *testing.T) {
	deployed, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "builds", "builder-seccomp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if string(deployed) != builder.SeccompProfile {
		t.Fatal("internal/builder/seccomp.json differs from deploy/kubernetes/builds/builder-seccomp.json: cp deploy/kubernetes/builds/builder-seccomp.json internal/builder/seccomp.json")
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []any  `json:"syscalls"`
	}
	if err := json.Unmarshal([]byte(builder.SeccompProfile), &p); err != nil || p.DefaultAction != "SCMP_ACT_ERRNO" || len(p.Syscalls) == 0 {
		t.Errorf("the profile does not read as a seccomp profile that refuses by default: %v %+v", err, p.DefaultAction)
	}
}
