package kubetest_test

// The local cluster's smoke suite: each test proves one thing the later
// Kubernetes tests stand on. Every test has its own restricted namespace
// and, where it is about what a runner can do, works through a
// ServiceAccount kubeconfig; the admin client only sets up and checks.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

const execTimeout = time.Minute

// runner returns a namespace and the REST config and client of a
// ServiceAccount "runner" there holding kubetest.PodRunnerRules.
func runner(t *testing.T, c *kubetest.Cluster) (string, *rest.Config, kubernetes.Interface) {
	t.Helper()
	ns := c.RestrictedNamespace(t)
	_, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("runner client: %v", err)
	}
	return ns, cfg, client
}

// execReady waits until exec works in the pod's main container.
func execReady(t *testing.T, cfg *rest.Config, pod *corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), execTimeout)
	defer cancel()
	if err := kubetest.WaitExecReady(ctx, cfg, pod.Namespace, pod.Name, kubetest.MainContainer); err != nil {
		t.Fatal(err)
	}
}

// run execs argv in the pod's main container and fails the test if the
// stream itself fails; the command's exit code is returned.
func run(t *testing.T, cfg *rest.Config, pod *corev1.Pod, argv []string, stdin string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), execTimeout)
	defer cancel()
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	o, e, code, err := kubetest.Exec(ctx, cfg, pod.Namespace, pod.Name, kubetest.MainContainer, argv, in)
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return string(o), string(e), code
}

func TestKube_JobBasePodRunsAndExecPassesStdinOutputAndExitCode(t *testing.T) {
	t.Parallel()
	c := kubetest.Connect(t)
	ns, cfg, client := runner(t, c)
	pod := c.StartPod(t, client, kubetest.RestrictedPod(ns, "job"))
	execReady(t, cfg, pod)

	stdout, stderr, code := run(t, cfg, pod, []string{"sh", "-c", "cat; echo hi; exit 3"}, "in")
	if stdout != "inhi\n" || code != 3 {
		t.Errorf("exec `cat; echo hi; exit 3` with STDIN \"in\": stdout %q, exit %d (stderr %q); want \"inhi\\n\", exit 3",
			stdout, code, stderr)
	}
}

func TestKube_HardenedPodIsUser1000WithoutCapabilitiesTokenOrWritableRoot(t *testing.T) {
	t.Parallel()
	c := kubetest.Connect(t)
	ns, cfg, client := runner(t, c)
	pod := c.StartPod(t, client, kubetest.RestrictedPod(ns, "hardened"))
	execReady(t, cfg, pod)

	if pod.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("QoS class %q, want Guaranteed (requests = limits)", pod.Status.QOSClass)
	}
	if out, _, _ := run(t, cfg, pod, []string{"id", "-u"}, ""); out != "1000\n" {
		t.Errorf("id -u = %q, want 1000", out)
	}
	if out, _, _ := run(t, cfg, pod, []string{"id", "-g"}, ""); out != "1000\n" {
		t.Errorf("id -g = %q, want 1000", out)
	}
	if _, stderr, code := run(t, cfg, pod, []string{"sh", "-c", "echo x > /x"}, ""); code == 0 {
		t.Errorf("writing /x succeeded; want a read-only root file system")
	} else if !strings.Contains(stderr, "Read-only file system") {
		t.Logf("writing /x failed (exit %d) with %q", code, stderr)
	}
	if _, stderr, code := run(t, cfg, pod, []string{"sh", "-c", "echo x > /tmp/x && cat /tmp/x"}, ""); code != 0 {
		t.Errorf("writing /tmp/x: exit %d (%s); want the /tmp emptyDir writable", code, stderr)
	}
	out, _, _ := run(t, cfg, pod, []string{"grep", "^Cap", "/proc/self/status"}, "")
	if !strings.Contains(out, "CapEff:\t0000000000000000\n") {
		t.Errorf("capabilities in the container:\n%s\nwant CapEff 0000000000000000", out)
	}
	if _, _, code := run(t, cfg, pod, []string{"test", "-e", "/var/run/secrets/kubernetes.io/serviceaccount/token"}, ""); code == 0 {
		t.Errorf("a ServiceAccount token is mounted; want none (automountServiceAccountToken: false)")
	}
}

func TestKube_ActiveDeadlineFailsPodWithDeadlineExceeded(t *testing.T) {
	t.Parallel()
	c := kubetest.Connect(t)
	ns, _, client := runner(t, c)
	pod := kubetest.RestrictedPod(ns, "deadline")
	pod.Spec.ActiveDeadlineSeconds = ptr.To[int64](5)
	start := time.Now()
	pod = c.StartPod(t, client, pod)
	got := c.WaitPod(t, ns, pod.Name, kubetest.PodPhase(corev1.PodFailed, "DeadlineExceeded"), 2*time.Minute)
	t.Logf("Failed/DeadlineExceeded %s after create: %s", time.Since(start).Round(100*time.Millisecond), got.Status.Message)
}

func TestKube_DependentPodIsGarbageCollectedAfterItsOwner(t *testing.T) {
	t.Parallel()
	c := kubetest.Connect(t)
	ns, _, client := runner(t, c)
	owner := c.StartPod(t, client, kubetest.RestrictedPod(ns, "owner"))
	dep := kubetest.RestrictedPod(ns, "dependent")
	dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID}}
	dep = c.StartPod(t, client, dep)

	background := metav1.DeletePropagationBackground
	if err := client.CoreV1().Pods(ns).Delete(t.Context(), owner.Name,
		metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatalf("delete owner pod: %v", err)
	}
	start := time.Now()
	c.WaitPod(t, ns, dep.Name, kubetest.PodGone, 2*time.Minute)
	t.Logf("dependent pod gone %s after its owner's deletion", time.Since(start).Round(100*time.Millisecond))
}

func TestKube_EgressPolicyBlocksPodToPodButNotClusterDNS(t *testing.T) {
	t.Parallel()
	c := kubetest.Connect(t)
	ns, cfg, client := runner(t, c)

	server := kubetest.RestrictedPod(ns, "server")
	server.Labels["app"] = "server"
	server.Spec.Containers[0].Command = []string{"nc", "-ll", "-p", "8080", "-e", "echo", "ok"}
	server = c.StartPod(t, client, server)
	clientPod := kubetest.RestrictedPod(ns, "client")
	clientPod.Labels["app"] = "client"
	clientPod = c.StartPod(t, client, clientPod)
	execReady(t, cfg, clientPod)

	// Always from a pod: the enforcer lets root-owned host sockets through.
	connect := func() (bool, string) {
		out, stderr, code := run(t, cfg, clientPod, []string{"nc", "-w", "2", server.Status.PodIP, "8080"}, "")
		return out == "ok\n" && code == 0, fmt.Sprintf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	blocked := func() (bool, string) { ok, seen := connect(); return !ok, seen }
	resolve := func() (bool, string) {
		out, stderr, code := run(t, cfg, clientPod, []string{"nslookup", "kubernetes.default.svc.cluster.local"}, "")
		return code == 0 && strings.Contains(out, "10.96.0.1"), fmt.Sprintf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	const enforce = time.Minute // policies are enforced asynchronously

	testwait.UntilEvery(t, enforce, time.Second, "client pod to reach server pod port 8080 without a policy", connect)
	testwait.UntilEvery(t, enforce, time.Second, "cluster DNS to resolve kubernetes.default without a policy", resolve)

	policies := c.Client.NetworkingV1().NetworkPolicies(ns)
	if _, err := policies.Create(t.Context(), egressPolicy(ns, "client"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create egress NetworkPolicy: %v", err)
	}
	testwait.UntilEvery(t, enforce, time.Second, "the egress policy to block client → server pod port 8080", blocked)
	testwait.UntilEvery(t, enforce, time.Second, "cluster DNS to still resolve kubernetes.default under the egress policy", resolve)
	if ok, seen := blocked(); !ok {
		t.Fatalf("client reached the server again under the egress policy: %s", seen)
	}

	if err := policies.Delete(t.Context(), "egress", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete egress NetworkPolicy: %v", err)
	}
	testwait.UntilEvery(t, enforce, time.Second, "client to reach server again after the policy's deletion", connect)
}

// egressPolicy is the egress policy job pods get: DNS to the cluster's
// kube-dns pods, and anything outside private, link-local and CGNAT ranges
// (where pods, services, nodes and metadata services live).
func egressPolicy(ns, app string) *networkingv1.NetworkPolicy {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "egress", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
				},
				{
					To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
						CIDR:   "0.0.0.0/0",
						Except: []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"},
					}}},
				},
			},
		},
	}
}

func TestKube_RunnerRoleAllowsPodsAndExecOnlyInItsNamespace(t *testing.T) {
	t.Parallel()
	c := kubetest.Connect(t)
	ns, cfg, client := runner(t, c)
	other := c.RestrictedNamespace(t)

	pod := c.StartPod(t, client, kubetest.RestrictedPod(ns, "job"))
	execReady(t, cfg, pod)
	if out, stderr, code := run(t, cfg, pod, []string{"echo", "ok"}, ""); out != "ok\n" || code != 0 {
		t.Errorf("exec as the runner: stdout %q, exit %d, stderr %q; want \"ok\\n\", 0", out, code, stderr)
	}

	ctx := t.Context()
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as the runner: error %v; want Forbidden", what, err)
		}
	}
	_, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	forbidden("list secrets in its own namespace", err)
	_, err = client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
	forbidden("create a secret in its own namespace", err)
	_, err = client.CoreV1().Pods(other).List(ctx, metav1.ListOptions{})
	forbidden("list pods in another namespace", err)
	_, err = client.CoreV1().Pods(other).Create(ctx, kubetest.RestrictedPod(other, "intruder"), metav1.CreateOptions{})
	forbidden("create a pod in another namespace", err)

	victim := c.StartPod(t, c.Client, kubetest.RestrictedPod(other, "victim"))
	ectx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	_, _, code, err := kubetest.Exec(ectx, cfg, other, victim.Name, kubetest.MainContainer, []string{"true"}, nil)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "forbidden") {
		t.Errorf("exec in another namespace as the runner: exit %d, error %v; want a forbidden error", code, err)
	} else {
		t.Logf("exec in another namespace as the runner: %v", err)
	}
}

func TestKube_AuditLogRecordsTheRunnersExec(t *testing.T) {
	t.Parallel()
	c := kubetest.Connect(t)
	ns, cfg, client := runner(t, c)
	pod := c.StartPod(t, client, kubetest.RestrictedPod(ns, "audited"))
	execReady(t, cfg, pod)

	var b [6]byte
	_, _ = rand.Read(b[:])
	marker := "kt-audit-" + hex.EncodeToString(b[:])
	if out, _, code := run(t, cfg, pod, []string{"echo", marker}, ""); out != marker+"\n" || code != 0 {
		t.Fatalf("exec echo %s: stdout %q, exit %d", marker, out, code)
	}
	q := kubetest.AuditQuery{
		Resource: "pods", Subresource: "exec", Namespace: ns, Name: pod.Name,
		User:               kubetest.ServiceAccountUser(ns, "runner"),
		RequestURIContains: "command=" + marker,
	}
	ev := c.WaitAuditQuery(t, 30*time.Second, q)
	if ev.Verb != "get" && ev.Verb != "create" {
		t.Errorf("audit event verb %q, want get (WebSocket) or create (SPDY)", ev.Verb)
	}
	code := 0
	if ev.ResponseStatus != nil {
		code = ev.ResponseStatus.Code
	}
	t.Logf("audit: %s %s stage=%s code=%d user=%s", ev.Verb, ev.RequestURI, ev.Stage, code, ev.User.Username)
}
