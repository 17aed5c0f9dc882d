package kube_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/kube"
)

// TestFacts_NamespaceOwnerOwnPodAndUserNamespace pins what a kube runner
// tells the server's Runners page (issue 25 item 3): the namespace of its
// job pods, what owns them, in a cluster its own pod ($POD_NAME, as the
// deployment's downward API sets it), and (issue 34) the
// --user-namespace mode with the process limit it gives, and whether it
// allows container builds. No cluster needed.
func TestFacts_NamespaceOwnerOwnPodAndUserNamespace(t *testing.T) {
	t.Setenv("POD_NAME", "knotless-runner-7d9f-x2")
	ex, err := kube.New(kube.Config{Config: agentenv.Config{Agent: "/bin/true"}, Rest: &rest.Config{Host: "http://127.0.0.1:1"},
		Namespace: "ci-jobs", InCluster: true, Owner: &metav1.OwnerReference{Kind: "Deployment", Name: "knotless-runner"}})
	if err != nil {
		t.Fatal(err)
	}
	got := ex.Facts()
	want := map[string]string{"namespace": "ci-jobs", "pod": "knotless-runner-7d9f-x2", "job pods owned by": "deployment/knotless-runner",
		"user namespace": "auto", "process limit": "1024 per job pod with a user namespace (--pids)",
		"container builds": "not allowed (--builds-namespace)"}
	if len(got) != len(want) {
		t.Fatalf("facts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("fact %q = %q, want %q", k, got[k], v)
		}
	}
	out, err := kube.New(kube.Config{Config: agentenv.Config{Agent: "/bin/true"}, Rest: &rest.Config{Host: "http://127.0.0.1:1"}, Namespace: "ci",
		UserNamespace: kube.UserNamespaceOff})
	if err != nil {
		t.Fatal(err)
	}
	if f := out.Facts(); len(f) != 4 || f["namespace"] != "ci" || f["user namespace"] != "off" || f["process limit"] != "none" {
		t.Errorf("outside a cluster, without an owner, --user-namespace off: %v, want the namespace, off and no process limit", f)
	}
	if _, err := kube.New(kube.Config{Config: agentenv.Config{Agent: "/bin/true"}, Rest: &rest.Config{Host: "http://127.0.0.1:1"}, Namespace: "ci",
		UserNamespace: "maybe"}); err == nil || !strings.Contains(err.Error(), "--user-namespace \"maybe\"") {
		t.Errorf("--user-namespace maybe: %v, want an error naming the flag and the value", err)
	}
}
