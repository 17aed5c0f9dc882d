package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
)

// sandboxEvent is a kubelet event as the API server stores it.
func sandboxEvent(uid types.UID, at time.Time, msg string) corev1.Event {
	return corev1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "job-1", UID: uid},
		Reason:         eventFailedSandbox, Type: corev1.EventTypeWarning, Message: msg,
		Source:        corev1.EventSource{Component: "kubelet", Host: "vm"},
		LastTimestamp: metav1.NewTime(at), FirstTimestamp: metav1.NewTime(at),
	}
}

// A RuntimeClass whose handler the node's runtime lacks leaves the pod
// ContainerCreating for ever: the run ends at once, naming the node, the
// class, the handler, the kubelet's words and the fix, for containerd's
// and CRI-O's wording.
func TestSandboxEventFault_MissingHandlerEndsTheRunAtOnce(t *testing.T) {
	now := time.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-1", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "vm", RuntimeClassName: ptr.To("gvisor")}}
	for _, said := range []string{
		`Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "runsc" is configured`,
		`Failed to create pod sandbox: rpc error: code = Unknown desc = no runtime handler "runsc" found`,
		`Failed to create pod sandbox: rpc error: code = Unknown desc = runtime handler "runsc" is not supported`,
	} {
		f := sandboxEventFault(pod, []corev1.Event{sandboxEvent("u1", now, said)}, now, now, time.Minute)
		if f == nil {
			t.Fatalf("%q: no fault one second in", said)
		}
		if f.Reason != api.ReasonExecutor {
			t.Errorf("reason %q, want %q", f.Reason, api.ReasonExecutor)
		}
		for _, want := range []string{"node vm", "RuntimeClass gvisor", `no handler "runsc"`, said, fixSep + "install the runtime", "runtimes.runsc]"} {
			if !strings.Contains(f.Message, want) {
				t.Errorf("message lacks %q:\n%s", want, f.Message)
			}
		}
	}
}

// Other sandbox failures (a network plugin starting, a runtime that
// crashes) end the run only once they have lasted the grace, with the
// newest event's words; events of an earlier pod of the same name and
// other reasons are not read.
func TestSandboxEventFault_OtherFailuresOnlyAfterTheGrace(t *testing.T) {
	t0 := time.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-1", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "vm", RuntimeClassName: ptr.To("gvisor")}}
	events := []corev1.Event{
		sandboxEvent("u1", t0.Add(2*time.Second), "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to create containerd task: newest"),
		sandboxEvent("u1", t0.Add(time.Second), "Failed to create pod sandbox: older"),
		sandboxEvent("u0", t0.Add(3*time.Second), `failed to get sandbox runtime: no runtime for "runsc" is configured`),
		{InvolvedObject: corev1.ObjectReference{UID: "u1"}, Reason: "Scheduled", Message: `no runtime for "x" is configured`},
	}
	if f := sandboxEventFault(pod, events, t0.Add(59*time.Second), t0, time.Minute); f != nil {
		t.Fatalf("a fault within the grace: %+v", f)
	}
	f := sandboxEventFault(pod, events, t0.Add(61*time.Second), t0, time.Minute)
	if f == nil || f.Reason != api.ReasonExecutor || !strings.Contains(f.Message, "newest") || !strings.Contains(f.Message, "RuntimeClass gvisor") || strings.Contains(f.Message, "older") {
		t.Fatalf("after the grace: %+v, want executor with the newest event's words", f)
	}
	if f := sandboxEventFault(pod, events[3:], t0.Add(time.Hour), t0, time.Minute); f != nil {
		t.Fatalf("an event of another reason read as a sandbox failure: %+v", f)
	}
}
