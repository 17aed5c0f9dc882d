package kube_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/test/kubetest"
)

// missingHandlerClass creates a RuntimeClass whose handler no node's
// runtime has, removed when the test ends; it returns the class and the
// handler.
func missingHandlerClass(t *testing.T, c *kubetest.Cluster) (string, string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name, handler := "kt-nohandler-"+hex.EncodeToString(b), "knotless-no-such-handler"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubetest.TestLabel: "kubetest"}},
		Handler:    handler,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Client.NodeV1().RuntimeClasses().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return name, handler
}

// TestKube_MissingRuntimeClassHandlerFailsPrepareWithinSecondsNamingTheFix:
// a RuntimeClass whose handler the node's container runtime lacks: the
// kubelet retries the pod's sandbox for ever (the pod stays
// ContainerCreating, its status silent) and says why only in an event
// ("no runtime for ... is configured"). Prepare reads it and fails within
// seconds, not at the run's timeout, naming the node, the class, the
// handler and the fix, and the pod is gone. It pins a run that waits for
// ever on such a pod.
func TestKube_MissingRuntimeClassHandlerFailsPrepareWithinSecondsNamingTheFix(t *testing.T) {
	f := newFixture(t)
	class, handler := missingHandlerClass(t, f.c)
	cfg := f.config()
	cfg.RuntimeClass = class
	e := f.executor(t, cfg)
	id := runID("nohandler")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := e.Prepare(ctx, f.spec(t, id))
	took := time.Since(t0)
	if err == nil {
		_ = s.Cleanup(context.Background())
		t.Fatalf("Prepare under RuntimeClass %s (handler %s, on no node) succeeded", class, handler)
	}
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonExecutor {
		t.Fatalf("Prepare after %s: %v; want a *executor.Fault with reason %s", took, err, api.ReasonExecutor)
	}
	for _, want := range []string{"node " + f.c.NodeName, "RuntimeClass " + class, `no handler "` + handler + `"`, "no runtime for", "runtimes." + handler + "]"} {
		if !strings.Contains(fault.Message, want) {
			t.Errorf("the fault lacks %q:\n%s", want, fault.Message)
		}
	}
	if took > 45*time.Second {
		t.Errorf("Prepare failed after %s; the kubelet's first event comes within seconds", took)
	}
	t.Logf("failed after %s: %s", took.Round(10*time.Millisecond), fault.Message)
	deadline := time.Now().Add(time.Minute)
	for len(f.leftovers(t, id)) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if left := f.leftovers(t, id); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Doctor under such a RuntimeClass: it names the class (not readable by
// the runner's Role: said, and left to the test pod), and the test pod
// fails naming the handler and how to configure it. Read by a credential
// that may, a RuntimeClass that does not exist fails at once.
func TestKubeDoctor_FailsNamingTheFixWhenTheRuntimeClassHandlerIsMissing(t *testing.T) {
	f := doctorFixture(t, kubetest.PodRunnerRules(), true)
	class, handler := missingHandlerClass(t, f.c)
	cfg := f.config()
	cfg.RuntimeClass = class
	checks, _ := doctor(t, f.executor(t, cfg), true)
	c, ok := checks["runtime class "+class]
	if !ok || !c.OK || !strings.Contains(c.Detail, "job pods ask for RuntimeClass "+class) {
		t.Errorf("check %q: %+v, want OK naming the class", "runtime class "+class, c)
	}
	run := checks["runtime class "+class+" runs job pods"]
	if run.OK || !strings.Contains(run.Detail, `no handler "`+handler+`"`) || !strings.Contains(run.Fix, "runtimes."+handler+"]") {
		t.Errorf("check %q: %+v, want FAIL naming the handler and the containerd section", "runtime class "+class+" runs job pods", run)
	}
	if c := checks["test job pod"]; c.OK {
		t.Errorf("the test pod ran under a RuntimeClass whose handler no node has: %+v", c)
	}

	admin := f.config()
	admin.Rest = f.c.Config
	admin.RuntimeClass = "kt-no-such-class"
	checks, _ = doctor(t, f.executor(t, admin), false)
	if c := checks["runtime class kt-no-such-class"]; c.OK || !strings.Contains(c.Detail, "no RuntimeClass kt-no-such-class") || !strings.Contains(c.Fix, "kind RuntimeClass") {
		t.Errorf("a RuntimeClass that does not exist: %+v, want FAIL saying to create it", c)
	}
}

// TestKube_GVisorJobPodSeesGVisorsKernelAndKeepsItsHardening: a job pod
// of RuntimeClass gvisor runs in gVisor's sandbox with its hardening
// intact inside: the steps see gVisor's kernel, not the node's;
// no capabilities, no_new_privs and the seccomp filter (oci-seccomp) hold
// for the step's processes; the pod carries the class and its overhead.
// Skipped (saying so) on a cluster without RuntimeClass gvisor; with
// KNOTLESS_TEST_CLUSTER_REQUIRED=1 a class whose handler cannot start a
// pod fails. It pins a step that runs on the node's kernel after all.
func TestKube_GVisorJobPodSeesGVisorsKernelAndKeepsItsHardening(t *testing.T) {
	f := newFixture(t)
	f.c.RequireRuntimeClass(t, kubetest.GVisor)
	cfg := f.config()
	cfg.RuntimeClass = kubetest.GVisor
	e := f.executor(t, cfg)
	id := runID("gvisor")
	s := f.prepare(t, e, f.spec(t, id))
	pod := f.storedPod(t, podOf(t, s))
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != kubetest.GVisor {
		t.Fatalf("the stored pod's runtimeClassName is %v, want %s", pod.Spec.RuntimeClassName, kubetest.GVisor)
	}
	if _, ok := pod.Spec.Overhead[corev1.ResourceMemory]; !ok {
		t.Errorf("the pod has no memory overhead from the RuntimeClass: %v", pod.Spec.Overhead)
	}
	assertHardened(t, pod, 1000, 1000, 10*time.Minute, id)

	res, out, err := runStep(t, s, "1", `uname -r; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status`, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v %v %q", res, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	node := unix.ByteSliceToString(uts.Release[:])
	if !kubetest.SandboxKernel(lines[0]) || lines[0] == node {
		t.Errorf("the step sees kernel %q (the node's is %q): not gVisor's", lines[0], node)
	}
	status := map[string]string{}
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ":")
		status[k] = strings.TrimSpace(v)
	}
	for k, want := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if status[k] != want {
			t.Errorf("%s of the step's process is %q, want %q (status %q)", k, status[k], want, out)
		}
	}
	t.Logf("the step sees kernel %s (node %s); %v", lines[0], node, status)
}

// The job pods of a test under $KNOTLESS_TEST_RUNTIME_CLASS carry it: the
// suites that run under it (make test-gvisor) test what they say.
func (f *fixture) assertRuntimeClass(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	got := ""
	if pod.Spec.RuntimeClassName != nil {
		got = *pod.Spec.RuntimeClassName
	}
	if got != f.runtimeClass {
		t.Errorf("pod %s has runtimeClassName %q, want %q", pod.Name, got, f.runtimeClass)
	}
}
