package dockertest

import (
	"os"
	"strings"
	"testing"
)

// The docker engine's job-postgres image and the cluster's must be the same
// image under the same tag: the two modules (test/cluster is one of its
// own, which this one does not import) each hold the pg-service script, so
// this test keeps the two copies byte for byte equal.
func TestPGService_SameScriptAsTheClustersImage(t *testing.T) {
	src, err := os.ReadFile("../cluster/images.go")
	if err != nil {
		t.Fatal(err)
	}
	const start = "const PGServiceScript = `"
	_, rest, ok := strings.Cut(string(src), start)
	script, _, ok2 := strings.Cut(rest, "`")
	if !ok || !ok2 {
		t.Fatalf("test/cluster/images.go has no %s...` constant", start)
	}
	if script != pgService {
		t.Errorf("pg-service differs between test/dockertest and test/cluster: change both, and the image tag")
	}
}
