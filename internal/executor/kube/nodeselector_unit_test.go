package kube

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// TestNodeSelector_JobPodsGoToLinuxNodesOfTheWorkflowsArch: every job pod
// selects kubernetes.io/os linux (a Windows node must never get one), and
// a workflow's arch: selects kubernetes.io/arch; a workflow asking for
// another architecture than the runner pins is refused naming both.
func TestNodeSelector_JobPodsGoToLinuxNodesOfTheWorkflowsArch(t *testing.T) {
	e := &Executor{cfg: Config{NodeSelector: map[string]string{"pool": "ci"}}}
	sel, err := e.nodeSelector(executor.Spec{})
	if err != nil || !maps.Equal(sel, map[string]string{"kubernetes.io/os": "linux", "pool": "ci"}) {
		t.Errorf("no arch: %v, %v", sel, err)
	}
	sel, err = e.nodeSelector(executor.Spec{Arch: "arm64"})
	if err != nil || sel["kubernetes.io/arch"] != "arm64" {
		t.Errorf("arch arm64: %v, %v", sel, err)
	}
	e.cfg.NodeSelector["kubernetes.io/arch"] = "amd64"
	_, err = e.nodeSelector(executor.Spec{Arch: "arm64"})
	var f *executor.Fault
	if !errors.As(err, &f) || f.Reason != api.ReasonUnsupported || !strings.Contains(f.Message, "arch: arm64") || !strings.Contains(f.Message, "kubernetes.io/arch=amd64") {
		t.Errorf("a conflicting arch: %v", err)
	}
	if len(e.cfg.NodeSelector) != 2 {
		t.Errorf("the runner's selector was changed: %v", e.cfg.NodeSelector)
	}
}
