package kube

import (
	"strings"
	"testing"

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
