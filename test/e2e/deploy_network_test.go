package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// From a job pod under deploy/kubernetes's NetworkPolicy, nothing of the
// cluster answers: not another pod, not a ClusterIP service, not the API
// server (by its service or the node's address), not the node (kubelet,
// and this host at the pods' gateway), while cluster DNS resolves. A pod
// without the job pods' label reaches every one of those targets, so the
// policy (enforced by the cluster's kube-network-policies) is what blocks;
// and only a connect timeout counts as blocked (a refusal, a missing nc or
// an empty node address fail the test).
func TestDeploy_JobPodReachesNoPodServiceAPIServerOrNodeButDNSWorks(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := c.Kubectl(ctx, moduleRoot, "-n", ns, "apply", "-f", filepath.Join("deploy", "kubernetes", "base", "networkpolicy.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// A listener on this host at the pods' gateway address.
	host := c.HostIP(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()

	target := kubetest.RestrictedPod(ns, "target")
	target.Labels["app"] = "target"
	target.Spec.Containers[0].Command = []string{"httpd", "-f", "-p", "8080", "-h", "/tmp"}
	target = c.StartPod(t, c.Client, target)
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "target"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "target"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiSvc, err := c.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeIP := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	if nodeIP == "" {
		t.Fatalf("node %s has no InternalIP address (%v): the node targets would be probed at an empty host", c.NodeName, node.Status.Addresses)
	}

	job := kubetest.RestrictedPod(ns, "job")
	job.Labels[agentenv.LabelManagedBy] = agentenv.ManagedBy
	job = c.StartPod(t, c.Client, job)
	control := c.StartPod(t, c.Client, kubetest.RestrictedPod(ns, "control"))

	podAddr := net.JoinHostPort(target.Status.PodIP, "8080")
	svcAddr := net.JoinHostPort(svc.Spec.ClusterIP, "80")
	targets := map[string]string{
		"another pod":                 podAddr,
		"a ClusterIP service":         svcAddr,
		"the API server (service)":    net.JoinHostPort(apiSvc.Spec.ClusterIP, "443"),
		"the API server (node)":       net.JoinHostPort(nodeIP, "6443"),
		"the node's kubelet":          net.JoinHostPort(nodeIP, "10250"),
		"the host at the pod gateway": ln.Addr().String(),
	}
	probe := func(t *testing.T, pod, addr string) probeResult { return probeTCP(t, ctx, c, ns, pod, addr) }
	// Positive control: a pod the policy does not select reaches every
	// target, so what the job pod cannot reach is the policy's doing (not a
	// target that is down, a wrong address or a missing nc).
	for what, addr := range targets {
		testwait.Until(t, 30*time.Second, "the control pod to reach "+what+" ("+addr+")", func() (bool, string) {
			r := probe(t, control.Name, addr)
			return r.connected(), r.String()
		})
	}
	// The API server of this cluster listens on the node itself: the
	// enforcement must filter packets to the node's own addresses (the
	// local cluster's enforcer does with test/cluster's input-hook patch).
	for what, addr := range targets {
		t.Run(what, func(t *testing.T) {
			// The policy applies within moments of the pod's start: wait
			// for the block. Only a connect timeout is a block; a refusal
			// or any other failure is not (something answered, or the
			// probe itself failed).
			testwait.UntilEvery(t, 30*time.Second, time.Second, "the policy to block "+what+" ("+addr+")", func() (bool, string) {
				r := probe(t, job.Name, addr)
				if !r.connected() && !r.timedOut() {
					t.Fatalf("the job pod's connection to %s (%s) neither got through nor timed out: %s", what, addr, r)
				}
				return r.timedOut(), r.String()
			})
		})
	}
	testwait.Until(t, 30*time.Second, "cluster DNS from the job pod", func() (bool, string) {
		out, errOut, code, err := kubetest.Exec(ctx, c.Config, ns, job.Name, kubetest.MainContainer,
			[]string{"nslookup", "target." + ns + ".svc.cluster.local"}, nil)
		if err != nil {
			t.Fatalf("exec nslookup: %v", err)
		}
		return code == 0 && strings.Contains(string(out), svc.Spec.ClusterIP), fmt.Sprintf("exit %d: %s%s", code, out, errOut)
	})
}

// probeResult is how one TCP connect from a pod ended.
type probeResult struct {
	code   int    // the probe's exit code: 0 once connected
	stderr string // nc's message: "nc: timed out" for a connect timeout
}

func (r probeResult) connected() bool { return r.code == 0 }

// timedOut is the one outcome that shows a block: the connect got no
// answer within nc's -w. A refusal (something answered), "not found"
// (no nc) or an empty address are other failures.
func (r probeResult) timedOut() bool {
	return r.code == 1 && strings.Contains(r.stderr, "timed out")
}

func (r probeResult) String() string { return fmt.Sprintf("exit %d, %q", r.code, r.stderr) }

// probeTCP connects from pod to addr with busybox nc (3 s connect
// timeout; exit 0 once connected and the peer closed).
func probeTCP(t *testing.T, ctx context.Context, c *kubetest.Cluster, ns, pod, addr string) probeResult {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil || h == "" {
		t.Fatalf("probe target %q has no host: %v", addr, err)
	}
	_, errOut, code, err := kubetest.Exec(ctx, c.Config, ns, pod, kubetest.MainContainer,
		[]string{"sh", "-c", fmt.Sprintf("echo GET / | nc -w 3 %s %s >/dev/null", h, p)}, nil)
	if err != nil {
		t.Fatalf("exec in %s: %v", pod, err)
	}
	return probeResult{code: code, stderr: strings.TrimSpace(string(errOut))}
}
