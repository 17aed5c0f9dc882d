package kube_test

import (
	"testing"

	"knotless.dev/knotless/internal/executor/kube"
)

// --owner takes KIND/NAME with kubectl's kind names and short names, and
// refuses anything else before the runner reaches the cluster.
func TestParseOwner_KindsShortNamesAndMistakes(t *testing.T) {
	for in, want := range map[string][2]string{
		"deployment/knotless-runner": {"deployment", "knotless-runner"},
		"deploy/knotless-runner":     {"deployment", "knotless-runner"},
		"Deployment/r":               {"deployment", "r"},
		"sts/r":                      {"statefulset", "r"},
		"cm/r":                       {"configmap", "r"},
		"pod/r":                      {"pod", "r"},
		"":                           {"", ""},
	} {
		k, n, err := kube.ParseOwner(in)
		if err != nil || k != want[0] || n != want[1] {
			t.Errorf("ParseOwner(%q) = %q %q %v, want %q %q", in, k, n, err, want[0], want[1])
		}
	}
	for _, bad := range []string{"deployment", "job/x", "deployment/Bad_Name", "/x", "deployment/"} {
		if _, _, err := kube.ParseOwner(bad); err == nil {
			t.Errorf("ParseOwner(%q) accepted it", bad)
		}
	}
}
