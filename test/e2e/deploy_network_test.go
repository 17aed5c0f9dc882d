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

	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// From a job pod under deploy/kubernetes's NetworkPolicy, nothing of the
// cluster answers: not another pod, not a ClusterIP service, not the API
// server (by its service or the node's address), not the node (kubelet,
// and this host at the pods' gateway), while cluster DNS resolves. A pod
// without the job pods' label reaches the same pod and service, so the
// policy (enforced by the cluster's kube-network-policies) is what blocks.
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

	job := kubetest.RestrictedPod(ns, "job")
	job.Labels[kube.LabelManagedBy] = kube.ManagedBy
	job = c.StartPod(t, c.Client, job)
	control := c.StartPod(t, c.Client, kubetest.RestrictedPod(ns, "control"))

	// connect reports whether pod opened a TCP connection to addr within
	// 3 s (busybox nc: exit 0 once connected and the peer closes).
	connect := func(pod, addr string) (bool, string) {
		h, p, _ := net.SplitHostPort(addr)
		out, errOut, code, err := kubetest.Exec(ctx, c.Config, ns, pod, kubetest.MainContainer,
			[]string{"sh", "-c", fmt.Sprintf("echo GET / | nc -w 3 %s %s >/dev/null", h, p)}, nil)
		if err != nil {
			t.Fatalf("exec in %s: %v", pod, err)
		}
		return code == 0, fmt.Sprintf("exit %d %s%s", code, out, errOut)
	}
	podAddr := net.JoinHostPort(target.Status.PodIP, "8080")
	svcAddr := net.JoinHostPort(svc.Spec.ClusterIP, "80")
	for _, addr := range []string{podAddr, svcAddr} {
		testwait.Until(t, 30*time.Second, "the control pod to reach "+addr, func() (bool, string) { return connect(control.Name, addr) })
	}
	blocked := map[string]string{
		"another pod":                 podAddr,
		"a ClusterIP service":         svcAddr,
		"the API server (service)":    net.JoinHostPort(apiSvc.Spec.ClusterIP, "443"),
		"the API server (node)":       net.JoinHostPort(nodeIP, "6443"),
		"the node's kubelet":          net.JoinHostPort(nodeIP, "10250"),
		"the host at the pod gateway": ln.Addr().String(),
	}
	// The API server of this cluster listens on the node itself: the
	// enforcement must filter packets to the node's own addresses (the
	// local cluster's enforcer does with test/cluster's input-hook patch).
	for what, addr := range blocked {
		t.Run(what, func(t *testing.T) {
			// The policy applies within moments of the pod's start: wait
			// for the block, then require it to hold.
			deadline := time.Now().Add(30 * time.Second)
			ok, out := connect(job.Name, addr)
			for ok && time.Now().Before(deadline) {
				time.Sleep(time.Second)
				ok, out = connect(job.Name, addr)
			}
			if ok {
				t.Errorf("the job pod reached %s (%s): %s", what, addr, out)
			}
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
