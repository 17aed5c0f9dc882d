package deploy

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// caseArm is one arm of a `case ... uname -m ... in` statement that sets
// arch: "x86_64|amd64) arch=amd64".
var caseArm = regexp.MustCompile(`(?m)^\s*([A-Za-z0-9_ |]+)\)\s*arch=([a-z0-9]+)\b`)

// The runner pod's init container and install.sh both pick a release's
// files by `uname -m`: each maps exactly the machines of Machines to their
// architecture, and Machines covers every one of Arches, so a host the one
// installs on is one the other installs on too, with the same files.
func TestMachines_ScriptsMapUnameAsDeployDoes(t *testing.T) {
	covered := map[string]bool{}
	for _, arch := range Machines {
		covered[arch] = true
	}
	if got := slices.Sorted(maps.Keys(covered)); !slices.Equal(got, Arches) {
		t.Fatalf("Machines maps to %v, want every one of Arches %v", got, Arches)
	}
	for _, script := range []string{Manifest, "internal/server/install.sh"} {
		text, err := os.ReadFile(filepath.Join(moduleRoot(t), script))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, m := range caseArm.FindAllStringSubmatch(string(text), -1) {
			for _, machine := range strings.Split(m[1], "|") {
				got[strings.TrimSpace(machine)] = m[2]
			}
		}
		if !maps.Equal(got, Machines) {
			t.Errorf("%s maps uname -m as %v, want deploy.Machines %v", script, got, Machines)
		}
	}
}
