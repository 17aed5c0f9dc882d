package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/executor/agentenv"
)

// TestNewBuilds_ItsOwnNamespaceNoOwnerAlwaysAUserNamespace pins the builds
// Executor: in --builds-namespace, always asking for a user namespace, no
// warm pods, and no owner reference even when the runner's job pods have
// one (a Deployment in another namespace counts as absent to the garbage
// collector, which would delete every builds pod at once); and the
// configuration errors, each naming the flag.
func TestNewBuilds_ItsOwnNamespaceNoOwnerAlwaysAUserNamespace(t *testing.T) {
	cfg := Config{Config: agentenv.Config{Agent: "/bin/true"}, Rest: &rest.Config{Host: "http://127.0.0.1:1"},
		Namespace: "ci", BuildsNamespace: "ci-builds", BuilderImage: "registry.example/builder:1", WarmPods: 2,
		UserNamespace: UserNamespaceOff, Owner: &metav1.OwnerReference{Kind: "Deployment", Name: "knotless-runner", UID: "u1"}}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := e.builds
	if b == nil || b.ns != "ci-builds" || b.cfg.Owner != nil || b.cfg.UserNamespace != UserNamespaceRequired || b.cfg.WarmPods != 0 || b.pool != nil ||
		!b.cfg.builder || b.cfg.BuilderSeccompProfile != DefaultBuilderSeccompProfile {
		t.Errorf("builds executor: %+v", b)
	}
	if e.cfg.Owner == nil || e.cfg.builder || e.ns != "ci" {
		t.Errorf("the job pods' executor changed: %+v", e.cfg)
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.BuildsNamespace = "ci" }, "--builds-namespace ci is the job pods' own namespace"},
		{func(c *Config) { c.BuilderImage = "" }, "needs --builder-image"},
		{func(c *Config) { c.BuildsNamespace = "Builds" }, `--builds-namespace "Builds"`},
	} {
		bad := cfg
		c.edit(&bad)
		if _, err := New(bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error containing %q", err, c.want)
		}
	}
}

// TestBuilderFault_TheBuilderIsNeverAForeignInitContainer pins how a
// builds pod whose builder ended is read: as the builder (its image, its
// exit), never as an init container "not the runner's", and as ended, so
// that a reader of why the run ended looks for the kubelet's eviction
// first (a cold CI run saw an eviction reported as the builder's exit:
// the kubelet had stopped the builder before the pod's status said
// Evicted).
func TestBuilderFault_TheBuilderIsNeverAForeignInitContainer(t *testing.T) {
	now := time.Now()
	pod := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{
		Name: BuilderContainer, Image: "b:1",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "buildkitd: stopped"}},
	}}}}
	if f := initFault(pod); f != nil {
		t.Errorf("initFault read the builder as a foreign init container: %+v", f)
	}
	f := builderFault(pod, now, now, time.Minute)
	if f == nil || f.Reason != "executor" || !strings.Contains(f.Message, "the builder (image b:1) exited with code 1") || !strings.Contains(f.Message, "buildkitd: stopped") {
		t.Errorf("builderFault: %+v", f)
	}
	if !builderEnded(pod) || builderEnded(&corev1.Pod{}) || builderEnded(nil) {
		t.Error("builderEnded")
	}
}
