package kwok

import (
	"os"
	"strings"
	"testing"
)

// The scale benchmark reads kwok's CRDs and stages at Version while the
// cluster's multi-call binary runs the kwok test/cluster/kube/go.mod
// requires: a stage the binary does not know would fail at start, or
// worse, fake pods differently from what the figures say.
func TestVersion_IsTheOneTheClusterBinaryIsBuiltWith(t *testing.T) {
	b, err := os.ReadFile("../cluster/kube/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "\t" + Module + " " + Version + "\n"
	if !strings.Contains(string(b), want) {
		t.Errorf("test/cluster/kube/go.mod does not require %s %s (kwok.Version); change both together and bump test/cluster's KubeModuleLevel", Module, Version)
	}
}
