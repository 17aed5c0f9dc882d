package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/test/kubetest"
)

// jobPodPolicy is the job-pod NetworkPolicy the manifests ship
// (deploy/kubernetes): no ingress; egress to the kube-dns pods on port 53
// and to the internet, never to private, link-local, loopback or CGNAT
// addresses, nor the documentation ranges (the local cluster's node is
// 192.0.2.2).
func jobPodPolicy() *networkingv1.NetworkPolicy {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "knotless-job-pods"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{agentenv.LabelManagedBy: agentenv.ManagedBy}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
				},
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0",
					Except: []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.2.0/24", "192.168.0.0/16", "198.51.100.0/24", "203.0.113.0/24"}}}}},
			},
		},
	}
}

// doctorFixture is a restricted namespace whose runner ServiceAccount has
// rules, with (when policy) the job-pod NetworkPolicy and another pod
// running (a target job pods must not reach).
func doctorFixture(t *testing.T, rules []rbacv1.PolicyRule, policy bool) *fixture {
	t.Helper()
	c := kubetest.Connect(t)
	rc := c.TestRuntimeClass(t)
	ns := c.RestrictedNamespace(t)
	path, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", rules)
	f := &fixture{c: c, ns: ns, rest: cfg, kubeconfig: path, agent: agenttest.Binary(t), runtimeClass: rc}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if policy {
		if _, err := c.Client.NetworkingV1().NetworkPolicies(ns).Create(ctx, jobPodPolicy(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, kubetest.RestrictedPod(ns, "other"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubetest.WaitPod(ctx, c.Client, ns, "other", kubetest.PodPhase(corev1.PodRunning, "")); err != nil {
		t.Fatal(err)
	}
	return f
}

// doctor runs the executor's checks and returns them by name.
func doctor(t *testing.T, e *kube.Executor, machine bool) (map[string]executor.Check, []executor.Check) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	byName := map[string]executor.Check{}
	var all []executor.Check
	e.Doctor(ctx, machine, func(c executor.Check) {
		t.Logf("ok=%v %s: %s; fix: %s", c.OK, c.Name, c.Detail, c.Fix)
		byName[c.Name] = c
		all = append(all, c)
	})
	return byName, all
}

// failed returns the failed checks' names.
func failed(all []executor.Check) []string {
	var out []string
	for _, c := range all {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// A namespace as the manifests make it (restricted, the runner's Role with
// get on its Deployment, the job-pod NetworkPolicy enforced): every check
// passes, the test pod included (the node and the API server unreachable
// too: the local cluster's enforcer filters pod-to-node traffic; its
// user namespace read from inside), and it is gone afterwards.
func TestKubeDoctor_PassesEveryCheckInACorrectNamespace(t *testing.T) {
	f := doctorFixture(t, ownerRules(), true)
	cfg := f.config()
	f.createRunnerDeployment(t)
	cfg.Owner = f.ownerOf(t, "deployment/"+runnerDeployment)
	checks, all := doctor(t, f.executor(t, cfg), true)
	bad := failed(all)
	if len(bad) > 0 {
		t.Fatalf("failed checks: %v", bad)
	}
	for _, name := range []string{"may create pods/exec", "may get deployments " + runnerDeployment, "Secrets not readable (get)",
		"namespace enforces Pod Security restricted", "step with a secret over the stream", "exit code", "DNS works in a job pod",
		"the API server's Service unreachable from a job pod", "test job pod removed"} {
		if _, ok := checks[name]; !ok {
			t.Errorf("no check %q", name)
		}
	}
	// The test pod's user namespace, read from its uid_map: one of its
	// own on runc (issue 34), none said plainly under gVisor.
	if c := checks["user namespace"]; !c.OK || f.runtimeClass == "" && !strings.Contains(c.Detail, "uids 0-65535 -> host ") ||
		f.runtimeClass != "" && !strings.Contains(c.Detail, "none: ") {
		t.Errorf("check %q: %+v", "user namespace", c)
	}
	if rc := f.runtimeClass; rc != "" {
		c := checks["runtime class "+rc+" runs job pods"]
		if !c.OK || (rc == kubetest.GVisor && !kubetest.SandboxKernel(c.Detail)) {
			t.Errorf("check %q: %+v, want OK naming the sandbox's kernel", "runtime class "+rc+" runs job pods", c)
		}
	}
	var others int
	for name := range checks {
		if strings.HasPrefix(name, "another pod ") || strings.HasPrefix(name, "the node ") {
			others++
		}
	}
	if others != 2 {
		t.Errorf("want checks for another pod and the node, got %d", others)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left, err := f.c.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: agentenv.LabelManagedBy + "=" + agentenv.ManagedBy})
	if err != nil || len(left.Items) > 0 {
		t.Errorf("doctor left job pods: %v %v", left, err)
	}
}

// A Role without create on pods/exec (WebSocket exec needs it since
// Kubernetes 1.35): the check fails naming the rule to add.
func TestKubeDoctor_FailsNamingTheFixWhenTheRoleLacksPodsExecCreate(t *testing.T) {
	rules := kubetest.PodRunnerRules()
	rules[1].Verbs = []string{"get"}
	f := doctorFixture(t, rules, true)
	checks, all := doctor(t, f.executor(t, f.config()), false)
	c := checks["may create pods/exec"]
	if c.OK || !strings.Contains(c.Fix, `{apiGroups: [""], resources: [pods/exec], verbs: [create]}`) {
		t.Fatalf("check %+v, want FAIL naming the rule", c)
	}
	if bad := failed(all); len(bad) != 1 {
		t.Errorf("failed checks %v, want only pods/exec create", bad)
	}
}

// No NetworkPolicy: with the runner's Role (no right on NetworkPolicies)
// the test pod finds the API server, the node and another pod reachable
// and says to apply the policy; with a credential that may list them, the
// listing says so too, also with --skip-machine.
func TestKubeDoctor_FailsNamingTheFixWhenNoNetworkPolicySelectsJobPods(t *testing.T) {
	f := doctorFixture(t, kubetest.PodRunnerRules(), false)
	checks, all := doctor(t, f.executor(t, f.config()), true)
	var reached []string
	for _, c := range all {
		if strings.HasSuffix(c.Name, "unreachable from a job pod") {
			if c.OK {
				t.Errorf("check %q passed without a NetworkPolicy: %s", c.Name, c.Detail)
			}
			if !strings.Contains(c.Fix, "NetworkPolicy") {
				t.Errorf("check %q: fix %q does not name the NetworkPolicy", c.Name, c.Fix)
			}
			reached = append(reached, c.Name)
		}
	}
	if len(reached) < 3 {
		t.Fatalf("reachability checks %v, want the API server, the node and another pod", reached)
	}
	if c := checks["DNS works in a job pod"]; !c.OK {
		t.Errorf("DNS check %+v", c)
	}

	withList := append(kubetest.PodRunnerRules(), rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list"}})
	_, cfg := f.c.ServiceAccountKubeconfig(t, f.ns, "admin-view", withList)
	viewer := f.config()
	viewer.Rest = cfg
	checks, _ = doctor(t, f.executor(t, viewer), false)
	if c := checks["a NetworkPolicy selects job pods"]; c.OK || !strings.Contains(c.Fix, "NetworkPolicy") {
		t.Fatalf("check %+v, want FAIL naming the NetworkPolicy", c)
	}
}

// A namespace that enforces only "baseline": a pod that breaks
// "restricted" is admitted, and the check names the label to set.
func TestKubeDoctor_FailsNamingTheFixWhenTheNamespaceIsNotRestricted(t *testing.T) {
	f := doctorFixture(t, kubetest.PodRunnerRules(), true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"baseline"}}}`)
	if _, err := f.c.Client.CoreV1().Namespaces().Patch(ctx, f.ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	checks, all := doctor(t, f.executor(t, f.config()), false)
	c := checks["namespace enforces Pod Security restricted"]
	if c.OK || !strings.Contains(c.Fix, "kubectl label namespace "+f.ns+" pod-security.kubernetes.io/enforce=restricted") {
		t.Fatalf("check %+v, want FAIL naming the label", c)
	}
	if bad := failed(all); len(bad) != 1 {
		t.Errorf("failed checks %v, want only the Pod Security one", bad)
	}
}
