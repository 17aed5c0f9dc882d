package deploy

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestBuilderSeccompProfile_IsContainerdsRuntimeDefaultPlusTheAdditions
// runs the tests of scripts/builder-seccomp, the module of its own that
// writes deploy/kubernetes/builds/builder-seccomp.json from containerd's
// contrib/seccomp (kept out of this module's go.mod): the committed file
// is what it writes, on amd64 it is containerd's DefaultProfile for the
// builder's capabilities plus the declared additions, and it holds
// containerd's arm64 branch. A syscall added by hand fails it.
func TestBuilderSeccompProfile_IsContainerdsRuntimeDefaultPlusTheAdditions(t *testing.T) {
	cmd := exec.Command("go", "test", "-count=1", ".")
	cmd.Dir = filepath.Join("..", "..", "scripts", "builder-seccomp")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test in scripts/builder-seccomp: %v\n%s", err, out)
	}
}
