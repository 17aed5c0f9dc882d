package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// The deployed runner's ServiceAccount may do exactly what the kube
// executor does, in its own namespace only, and nothing on Secrets
// (the credential reaches the pod as a volume); the runner pod passes Pod
// Security "restricted" (the namespace enforces it) with a read-only root
// file system, and only the init container sees the credential Secret.
func TestDeploy_RunnerMayUseOnlyPodsAndExecInItsNamespaceAndNoSecrets(t *testing.T) {
	c := kubetest.Connect(t)
	state := filepath.Join(t.TempDir(), "runner.json")
	if err := os.WriteFile(state, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := applyRunner(t, c, "emptydir", "http://127.0.0.1:1/none", state, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	sa := "system:serviceaccount:" + d.ns + ":knotless-runner"
	canI := func(ns, verb, resource string) bool {
		args := []string{"auth", "can-i", verb, resource, "-n", ns, "--as", sa}
		if res, sub, ok := strings.Cut(resource, "/"); ok { // "pods/exec" alone would name a pod "exec"
			args = []string{"auth", "can-i", verb, res, "--subresource", sub, "-n", ns, "--as", sa}
		}
		out, _ := d.kubectl(ctx, args...)
		return strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]) == "yes"
	}
	for _, r := range [][2]string{{"create", "pods"}, {"get", "pods"}, {"list", "pods"}, {"watch", "pods"}, {"delete", "pods"},
		{"patch", "pods"}, {"create", "pods/exec"}, {"get", "pods/exec"}, {"list", "events"}} {
		if !canI(d.ns, r[0], r[1]) {
			t.Errorf("the runner may not %s %s in its namespace", r[0], r[1])
		}
	}
	for _, r := range [][3]string{{d.ns, "get", "secrets"}, {d.ns, "list", "secrets"}, {d.ns, "watch", "secrets"},
		{d.ns, "create", "secrets"}, {d.ns, "update", "pods"}, {d.ns, "create", "pods/attach"}, {d.ns, "create", "pods/portforward"},
		{d.ns, "create", "pods/ephemeralcontainers"}, {d.ns, "watch", "events"}, {d.ns, "patch", "roles"}, {d.ns, "create", "networkpolicies"}, {d.ns, "create", "configmaps"},
		{"default", "create", "pods"}, {"default", "list", "pods"}, {"kube-system", "get", "secrets"}} {
		if canI(r[0], r[1], r[2]) {
			t.Errorf("the runner may %s %s in namespace %s", r[1], r[2], r[0])
		}
	}
	// The restart design's one rule: get on the runner's own Deployment
	// (the job pods' owner), nothing more on Deployments.
	for _, r := range [][3]string{{"get", "deployment/knotless-runner", "yes"}, {"list", "deployments", "no"},
		{"get", "deployment/another", "no"}, {"update", "deployment/knotless-runner", "no"}, {"patch", "deployment/knotless-runner", "no"}} {
		out, _ := d.kubectl(ctx, "auth", "can-i", r[0], r[1], "-n", d.ns, "--as", sa)
		if got := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]); got != r[2] {
			t.Errorf("may the runner %s %s? %q, want %s", r[0], r[1], got, r[2])
		}
	}
	if out, _ := d.kubectl(ctx, "auth", "can-i", "list", "nodes", "--as", sa); strings.HasPrefix(out, "yes") {
		t.Errorf("the runner may list nodes")
	}

	// The pod the API server admitted under "restricted".
	var pod *corev1.Pod
	testwait.Until(t, 2*time.Minute, "the runner pod", func() (bool, string) {
		list, err := c.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=knotless-runner"})
		if err != nil || len(list.Items) == 0 {
			return false, "no pod yet"
		}
		pod = &list.Items[0]
		return true, ""
	})
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, d.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace labels %v: want Pod Security restricted enforced", ns.Labels)
	}
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want non-root, a numeric user, seccomp RuntimeDefault", psc)
	}
	for _, ctr := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		sc := ctr.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
			*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s: security context %+v: want a read-only root, no escalation, ALL dropped", ctr.Name, sc)
		}
		for _, m := range ctr.VolumeMounts {
			if m.Name == "credential" && (ctr.Name != "install" || !m.ReadOnly) {
				t.Errorf("container %s mounts the credential Secret (read-only %v): only the init container may, read-only", ctr.Name, m.ReadOnly)
			}
		}
		for _, e := range ctr.EnvFrom {
			if e.SecretRef != nil {
				t.Errorf("container %s takes environment from Secret %s", ctr.Name, e.SecretRef.Name)
			}
		}
	}
	if pod.Spec.HostNetwork || pod.Spec.HostPID || pod.Spec.HostIPC {
		t.Errorf("runner pod shares a host namespace")
	}

	// One replica, never two at once.
	out, err := d.kubectl(ctx, "-n", d.ns, "get", "deploy/knotless-runner", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := json.Unmarshal([]byte(out), &dep); err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("deployment: replicas %v strategy %s, want 1 and Recreate", dep.Spec.Replicas, dep.Spec.Strategy.Type)
	}
	// No ClusterRole or ClusterRoleBinding in the manifests.
	for _, variant := range []string{"emptydir", "pvc"} {
		out, err := c.Kubectl(ctx, moduleRoot, "kustomize", filepath.Join("deploy", "kubernetes", "overlays", variant))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "kind: ClusterRole") {
			t.Errorf("overlay %s has a ClusterRole or ClusterRoleBinding", variant)
		}
		if variant == "pvc" && !strings.Contains(out, "claimName: knotless-runner-work") {
			t.Errorf("overlay pvc does not put the work directory on its claim:\n%s", out)
		}
	}
}
