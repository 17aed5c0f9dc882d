package main

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"knotless.dev/knotless/internal/executor/kube"
)

// The floor's pod is the kube executor's job pod (kube.BenchPod: podFor
// with the default Config) at the same sizes and image, metadata and PID
// 1 aside; the only fields apart are those BenchPod leaves as the
// runner does not: the pull policy (BenchPod's Never, the runner's the
// image's default, which the API server fills in the same), the user
// namespace (the runner's --user-namespace auto asks for one) and the
// runner's node selector on the OS.
func TestFloorPod_IsTheKubeExecutorsJobPod(t *testing.T) {
	job := kube.BenchPod("ns", floorContainer)
	bc := &burstConfig{cpus: "1", memory: "128Mi", disk: "256Mi", image: job.Spec.Containers[0].Image}
	floor, err := floorPod("ns", "floor-000", "x", bc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	got := specCheck(floor, b)
	want := `differs: spec.hostUsers: floor false, job pod null; spec.nodeSelector: floor {"kubernetes.io/os":"linux"}, job pod null`
	if got != want {
		t.Errorf("specCheck(floorPod, kube.BenchPod) = %s\nwant %s", got, want)
	}

	// A field apart anywhere is said with its path.
	job.Spec.Containers[0].ImagePullPolicy = ""
	job.Spec.HostUsers, job.Spec.NodeSelector = floor.Spec.HostUsers, floor.Spec.NodeSelector
	job.Spec.Volumes[2].EmptyDir.SizeLimit = nil
	b, _ = json.Marshal(job)
	if got := specCheck(floor, b); !strings.HasPrefix(got, "differs: spec.volumes[2].emptyDir.sizeLimit: floor \"256Mi\", job pod null") ||
		strings.Count(got, ";") != 0 {
		t.Errorf("specCheck with the job pod's third emptyDir unlimited = %s", got)
	}
	job.Spec.Volumes[2].EmptyDir.SizeLimit = floor.Spec.Volumes[2].EmptyDir.SizeLimit
	job.Spec.Containers[0].Command = []string{"other"}
	job.Labels = map[string]string{"other": "x"}
	b, _ = json.Marshal(job)
	if got := specCheck(floor, b); got != "same (metadata and command aside)" {
		t.Errorf("specCheck of the same pod but for labels and command = %s", got)
	}
	if got := specCheck(floor, nil); !strings.HasPrefix(got, "not checked") {
		t.Errorf("specCheck without a job pod = %s", got)
	}
}

// The floor's watch says a pod runs only once its container is running,
// ends the wait at once with the reason of a container that cannot start,
// and says a pod gone when it is deleted.
func TestFloorWatch_RunningOnlyWithTheContainerRunningHopelessAtOnce(t *testing.T) {
	fw := &floorWatch{pods: map[string]*floorPodState{}}
	for _, n := range []string{"a", "b"} {
		fw.pods[n] = &floorPodState{running: make(chan struct{}), gone: make(chan struct{})}
	}
	closed := func(c chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	pod := func(name string, phase corev1.PodPhase, cs corev1.ContainerState) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: floorContainer, State: cs}}}}
		p.Name = name
		return p
	}
	fw.seen(pod("a", corev1.PodRunning, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}), false)
	if closed(fw.pods["a"].running) {
		t.Fatal("a pod Running with its container still creating is said running")
	}
	fw.seen(pod("a", corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}), false)
	if !closed(fw.pods["a"].running) || fw.pods["a"].err != nil || fw.pods["a"].runAt.IsZero() {
		t.Fatalf("a pod whose container runs: running %v, err %v, at %v", closed(fw.pods["a"].running), fw.pods["a"].err, fw.pods["a"].runAt)
	}
	fw.seen(pod("b", corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "not present"}}), false)
	if !closed(fw.pods["b"].running) || fw.pods["b"].err == nil || !strings.Contains(fw.pods["b"].err.Error(), "ErrImageNeverPull") {
		t.Fatalf("a pod whose image is never pulled: ended %v, err %v", closed(fw.pods["b"].running), fw.pods["b"].err)
	}
	fw.seen(pod("a", corev1.PodRunning, corev1.ContainerState{}), true)
	if !closed(fw.pods["a"].gone) {
		t.Fatal("a deleted pod is not said gone")
	}
	fw.seen(pod("other", corev1.PodRunning, corev1.ContainerState{}), false) // not the floor's: ignored
}
