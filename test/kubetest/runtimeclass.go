package kubetest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
)

const (
	// EnvRuntimeClass, when set, names the RuntimeClass the kube executor's
	// tests give their job pods (make test-gvisor sets GVisor); empty: the
	// node's default runtime (runc).
	EnvRuntimeClass = "KNOTLESS_TEST_RUNTIME_CLASS"
	// GVisor is the RuntimeClass test/cluster creates for gVisor (handler
	// runsc).
	GVisor = "gvisor"
	// runtimeProbeTimeout bounds the probe pod of a RuntimeClass: a working
	// handler starts it in seconds.
	runtimeProbeTimeout = 2 * time.Minute
)

// TestRuntimeClass returns $KNOTLESS_TEST_RUNTIME_CLASS ("" when unset)
// after RequireRuntimeClass checked it.
func (c *Cluster) TestRuntimeClass(t testing.TB) string {
	t.Helper()
	name := os.Getenv(EnvRuntimeClass)
	if name != "" {
		c.RequireRuntimeClass(t, name)
	}
	return name
}

var (
	probeMu   sync.Mutex
	probeDone = map[string]error{} // RuntimeClass → the probe's result, once per process
)

// RequireRuntimeClass checks that pods of RuntimeClass name run on the
// cluster. A cluster without that RuntimeClass (one started by a harness
// older than it: restart it) fails the test with
// KNOTLESS_TEST_CLUSTER_REQUIRED=1, where a skip would let the whole
// gVisor suite pass having run nothing, and skips it without, saying how
// to get the class either way. Otherwise a probe
// pod (RestrictedPod under the class, in a namespace of its own) must reach
// Running within 2 minutes; when it does not (the node's runtime lacks the
// handler, or the handler cannot start a sandbox), the test fails with
// KNOTLESS_TEST_CLUSTER_REQUIRED=1 and skips without it, naming the pod's
// status and the kubelet's events (at the kubelet's first "no runtime for"
// event when the handler is missing). The probe runs once per test process
// and class.
func (c *Cluster) RequireRuntimeClass(t testing.TB, name string) {
	t.Helper()
	required := os.Getenv(EnvRequired) == "1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := c.Client.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		msg := fmt.Sprintf("the cluster has no RuntimeClass %s: it was started by an older test/cluster harness, or the class was deleted; restart it with the current one (make cluster-down cluster-up: up creates RuntimeClass %s, handler runsc) to run this test under %s", name, GVisor, name)
		if required {
			t.Fatal(msg + " (" + EnvRequired + "=1: a missing RuntimeClass must not pass for a skipped test)")
		}
		t.Skip(msg + "\n(set " + EnvRequired + "=1 to fail instead)")
	}
	if err != nil {
		t.Fatalf("read RuntimeClass %s: %v", name, err)
	}
	probeMu.Lock()
	defer probeMu.Unlock()
	perr, done := probeDone[name]
	if !done {
		perr = c.probeRuntimeClass(t, name)
		probeDone[name] = perr
	}
	if perr == nil {
		return
	}
	msg := fmt.Sprintf("RuntimeClass %s (handler %s) cannot run pods on this cluster: %v", name, rc.Handler, perr)
	if required {
		t.Fatal(msg)
	}
	t.Skip(msg + "\n(set " + EnvRequired + "=1 to fail instead)")
}

// probeRuntimeClass starts a RestrictedPod of RuntimeClass name in a
// namespace of its own and waits until it runs; the namespace is deleted
// with the test.
func (c *Cluster) probeRuntimeClass(t testing.TB, name string) error {
	t.Helper()
	ns := c.RestrictedNamespace(t)
	pod := RestrictedPod(ns, "runtime-probe")
	pod.Spec.RuntimeClassName = ptr.To(name)
	ctx, cancel := context.WithTimeout(context.Background(), runtimeProbeTimeout)
	defer cancel()
	t0 := time.Now()
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create a probe pod: %w", err)
	}
	// A node without the handler: the kubelet retries the sandbox for
	// ever and says why only in an event; stop at the first one.
	noHandler := make(chan string, 1)
	go func() {
		for ctx.Err() == nil {
			evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.name": pod.Name, "reason": "FailedCreatePodSandBox"}.String(),
			})
			if err == nil {
				for _, ev := range evs.Items {
					if strings.Contains(ev.Message, "no runtime for") {
						noHandler <- ev.Message
						cancel()
						return
					}
				}
			}
			_ = sleep(ctx, time.Second)
		}
	}()
	p, err := WaitPod(ctx, c.Client, ns, pod.Name, PodRunning)
	select {
	case msg := <-noHandler:
		return fmt.Errorf("the node's container runtime has no handler for it: the kubelet says %q", msg)
	default:
	}
	if err != nil {
		return err
	}
	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != name {
		return fmt.Errorf("the probe pod runs without RuntimeClass %s (runtimeClassName %v)", name, p.Spec.RuntimeClassName)
	}
	t.Logf("RuntimeClass %s: a probe pod ran after %s", name, time.Since(t0).Round(10*time.Millisecond))
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	_ = c.Client.CoreV1().Pods(ns).Delete(dctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	return nil
}

// SandboxKernel reports whether a kernel release (uname -r in a pod) is a
// sandbox's rather than the node's: gVisor's says "gvisor".
func SandboxKernel(release string) bool {
	return strings.Contains(release, "gvisor")
}
