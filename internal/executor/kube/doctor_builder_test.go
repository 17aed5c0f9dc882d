package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/kube"
)

// The builder check of doctor (issue 34: the Localhost seccomp profile
// reaches the nodes by deploy/kubernetes/builds' DaemonSet, checked by
// doctor). With the DaemonSet applied (buildsFixture installs it as an
// operator would) a builds pod's BuildKit answers a step, and the pod is
// gone afterwards.
func TestKubeDoctor_BuilderAnswersWhereTheDaemonSetWroteTheProfile(t *testing.T) {
	f, cfg := buildsFixture(t)
	checks, _ := doctor(t, f.executor(t, cfg), true)
	if c, ok := checks["builder runs BuildKit"]; !ok || !c.OK || !strings.Contains(c.Detail, "seccomp profile Localhost knotless/builder.json") {
		t.Errorf("check %q: %+v (found %v)", "builder runs BuildKit", c, ok)
	}
	noBuildsPods(t, f, cfg)
}

// noBuildsPods fails the test when job pods are left in the builds
// namespace.
func noBuildsPods(t *testing.T, f *fixture, cfg kube.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left, err := f.c.Client.CoreV1().Pods(cfg.BuildsNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentenv.LabelManagedBy + "=" + agentenv.ManagedBy})
	if err != nil || len(left.Items) > 0 {
		t.Errorf("doctor left pods in the builds namespace: %d %v", len(left.Items), err)
	}
}

// A node without the builder's profile (here: a profile name no node
// has): the check fails, its fix names the DaemonSet that writes it and
// the flag, and no pod is left.
func TestKubeDoctor_BuilderFailsNamingTheDaemonSetWhereTheNodeLacksTheProfile(t *testing.T) {
	f, cfg := buildsFixture(t)
	cfg.BuilderSeccompProfile = "knotless/missing-" + runID("profile") + ".json"
	checks, _ := doctor(t, f.executor(t, cfg), true)
	c, ok := checks["builder runs BuildKit"]
	if !ok || c.OK || !strings.Contains(c.Fix, "deploy/kubernetes/builds") || !strings.Contains(c.Fix, "--builder-seccomp-profile") ||
		!strings.Contains(c.Fix, cfg.BuilderSeccompProfile) {
		t.Errorf("check %q: %+v (found %v); want a failure whose fix names deploy/kubernetes/builds, the profile and --builder-seccomp-profile", "builder runs BuildKit", c, ok)
	}
	noBuildsPods(t, f, cfg)
}
