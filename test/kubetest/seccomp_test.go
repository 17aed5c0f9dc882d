package kubetest_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/test/kubetest"
)

// TestInstallBuilderSeccompProfile_TheDeployDaemonSetWroteTheNodesProfile:
// the node's profile (which InstallBuilderSeccompProfile checks to hold
// builder-seccomp.json's bytes) was last written by the init container of
// deploy/kubernetes/builds' DaemonSet, within the time it ran, not by the
// tests themselves; and the DaemonSet's pod stays Running (its idle
// container), as on an operator's nodes. A second install changes nothing.
func TestInstallBuilderSeccompProfile_TheDeployDaemonSetWroteTheNodesProfile(t *testing.T) {
	c := kubetest.Connect(t)
	c.InstallBuilderSeccompProfile(t)
	pods, err := c.Client.CoreV1().Pods("knotless-seccomp").List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=knotless-builder-seccomp"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d pods of the seccomp DaemonSet, want 1 (one node)", len(pods.Items))
	}
	p := pods.Items[0]
	if p.Status.Phase != "Running" || len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Terminated == nil ||
		p.Status.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("the DaemonSet's pod %s: phase %s, init containers %+v", p.Name, p.Status.Phase, p.Status.InitContainerStatuses)
	}
	run := p.Status.InitContainerStatuses[0].State.Terminated
	st, err := os.Stat(filepath.Join(c.StateDir, "kubelet", "root", "seccomp", kubetest.BuilderSeccompProfile))
	if err != nil {
		t.Fatal(err)
	}
	// The API's times are whole seconds.
	if from, to := run.StartedAt.Add(-time.Second), run.FinishedAt.Add(time.Second); st.ModTime().Before(from) || st.ModTime().After(to) {
		t.Errorf("the node's profile was written at %s, not while the DaemonSet's init container ran (%s to %s)", st.ModTime(), run.StartedAt, run.FinishedAt)
	}

	c.InstallBuilderSeccompProfile(t)
	again, err := c.Client.CoreV1().Pods("knotless-seccomp").Get(t.Context(), p.Name, metav1.GetOptions{})
	if err != nil || again.UID != p.UID {
		t.Errorf("a second install replaced the DaemonSet's pod %s: %v", p.Name, err)
	}
}
