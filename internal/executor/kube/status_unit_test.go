package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"knotless.dev/knotless/internal/api"
)

// TestPodFault_PreemptionIsNotAnEviction: the scheduler's preemption and
// a drain once read the same in `run show` (errored (evicted)); a person
// and a retry rule must tell them apart, so preemption has its own
// reason. The kubelet's eviction keeps the kubelet's words (what it
// measured), never pod-lost.
func TestPodFault_PreemptionIsNotAnEviction(t *testing.T) {
	disrupted := func(reason, msg string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason, Message: msg}}}}
	}
	now := time.Now()
	for _, tc := range []struct {
		pod          *corev1.Pod
		reason, word string
	}{
		{disrupted("PreemptionByScheduler", "Preempted by pod 1234 on node vm"), api.ReasonPreempted, "preempted by the scheduler"},
		{disrupted("EvictionByEvictionAPI", "Eviction API: evicting"), api.ReasonEvicted, "Eviction API (a drain"},
		{disrupted("TerminationByKubelet", "The node was low on resource: memory."), api.ReasonEvicted, "low on resource"},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted",
			Message:    `Usage of EmptyDir volume "knotless" exceeds the limit "1Gi". `,
			Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"}}}},
			api.ReasonEvicted, `Usage of EmptyDir volume "knotless" exceeds the limit "1Gi".`},
	} {
		f := podFault(tc.pod, now, now, 0, 0)
		if f == nil || f.Reason != tc.reason || !strings.Contains(f.Message, tc.word) {
			t.Errorf("%+v: fault %+v, want %s saying %q", tc.pod.Status, f, tc.reason, tc.word)
		}
	}
}

// TestPodFault_ExecFormatErrorNamesTheArchitecture: a container whose
// program cannot execute on its node ends the run naming it, not as
// pod-lost "exit code 1".
func TestPodFault_ExecFormatErrorNamesTheArchitecture(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
		Name: Container, Image: "example/arm64-only:1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: "StartError", ExitCode: 128,
			Message: `failed to create containerd task: OCI runtime create failed: exec: "/bin/sh": exec format error: unknown`}}}}}}
	f := podFault(pod, time.Now(), time.Now(), 0, 0)
	if f == nil || f.Reason != api.ReasonUnsupported || !strings.Contains(f.Message, "another architecture") || !strings.Contains(f.Message, "example/arm64-only:1") {
		t.Errorf("fault %+v", f)
	}
}

// TestPodFault_FailedInitContainerIsNamed: an init container added by
// admission that exits 1 made the run errored (pod-lost), "the job pod
// ended (phase Failed)", before any step ran; the run now names the
// container, its exit code and the kubelet's message.
func TestPodFault_FailedInitContainerIsNamed(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed,
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "istio-init", Image: "proxyv2:1.2", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "iptables: permission denied"}}}}}}
	f := podFault(pod, time.Now(), time.Now(), 0, 0)
	if f == nil || f.Reason == api.ReasonPodLost || !strings.Contains(f.Message, `"istio-init"`) || !strings.Contains(f.Message, "code 1") || !strings.Contains(f.Message, "iptables: permission denied") {
		t.Errorf("fault %+v", f)
	}
}

// TestStuckWaiting_PullFailuresWaitTheirGraceUnlessTheNameNeverPulls pins
// the one classification the job container, services and the builder
// share: a pull that fails may be a registry's hiccup until pullGrace, a
// name that can never be pulled fails at once, a container the kubelet
// cannot create is the executor's fault, any other wait is none.
func TestStuckWaiting_PullFailuresWaitTheirGraceUnlessTheNameNeverPulls(t *testing.T) {
	const grace = time.Minute
	for _, c := range []struct {
		reason string
		waited time.Duration
		want   string
	}{
		{"ErrImagePull", grace - time.Second, ""},
		{"ImagePullBackOff", grace, api.ReasonImagePull},
		{"InvalidImageName", 0, api.ReasonImagePull},
		{"ErrImageNeverPull", 0, api.ReasonImagePull},
		{"CreateContainerConfigError", 0, api.ReasonExecutor},
		{"RunContainerError", 0, api.ReasonExecutor},
		{"ContainerCreating", time.Hour, ""},
		{"PodInitializing", time.Hour, ""},
	} {
		if got := stuckWaiting(&corev1.ContainerStateWaiting{Reason: c.reason}, c.waited, grace); got != c.want {
			t.Errorf("%s after %v: %q, want %q", c.reason, c.waited, got, c.want)
		}
	}
	if got := stuckWaiting(nil, time.Hour, grace); got != "" {
		t.Errorf("no wait: %q, want none", got)
	}
}
