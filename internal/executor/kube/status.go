package kube

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// Reasons of a job pod's end.
const (
	ReasonUnschedulable = api.ReasonUnschedulable
	ReasonPodLost       = api.ReasonPodLost
)

// podFault reads why pod cannot (or can no longer) run steps, from its
// status alone; nil when nothing is wrong yet. since is when the pod was
// created (by this runner's clock), for the grace periods: an image that
// cannot be pulled for longer than pullGrace is image-pull, a pod Pending
// (unscheduled) for longer than pending is unschedulable. A nil pod is a
// pod that is gone.
//
// The order follows what Kubernetes reports wrongly elsewhere
// (docs/kubernetes.md, "What Kubernetes reports wrongly"): a container terminated OOMKilled is oom-killed whatever
// its exit code and the pod's phase; an eviction (status.reason Evicted
// or a DisruptionTarget condition) is evicted even when the container
// exited 0; DeadlineExceeded is timeout; a pod that ended any other way
// is pod-lost, never a success.
func podFault(pod *corev1.Pod, now, since time.Time, pullGrace, pending time.Duration) *executor.Fault {
	if pod == nil {
		return &executor.Fault{Reason: ReasonPodLost, Message: "the job pod is gone (deleted from outside the runner?)"}
	}
	// The kubelet's eviction (the node's pressure, an emptyDir or the
	// pod's ephemeral storage over its limit) says what it measured in
	// the pod's status: its words, before the condition's.
	if pod.Status.Reason == "Evicted" {
		return &executor.Fault{Reason: api.ReasonEvicted, Message: "the job pod was evicted by the kubelet: " + strings.TrimSpace(pod.Status.Message)}
	}
	// A disruption (the Eviction API: a drain; the kubelet; a NoExecute
	// taint; the scheduler's preemption) marks the pod DisruptionTarget
	// and then deletes it: evicted or preempted, never pod-lost.
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return disruptionFault(c.Reason, c.Message)
		}
	}
	if pod.DeletionTimestamp != nil {
		return &executor.Fault{Reason: ReasonPodLost, Message: fmt.Sprintf("the job pod %s is being deleted (not by the runner)", pod.Name)}
	}
	if pod.Status.Reason == "DeadlineExceeded" {
		return &executor.Fault{Reason: api.ReasonTimeout, Message: "the job pod passed its activeDeadlineSeconds: " + pod.Status.Message}
	}
	if f := initFault(pod); f != nil {
		return f
	}
	cs := jobStatus(pod)
	if cs != nil {
		if f := execFormatFault(cs); f != nil {
			return f
		}
		if t := cs.State.Terminated; t != nil {
			if t.Reason == "OOMKilled" {
				return &executor.Fault{Reason: api.ReasonOOMKilled, Message: fmt.Sprintf("the job container was killed for exceeding its memory limit (exit code %d)", t.ExitCode)}
			}
			msg := fmt.Sprintf("the job container ended (%s, exit code %d)", t.Reason, t.ExitCode)
			if t.Message != "" {
				msg += ": " + t.Message
			}
			return &executor.Fault{Reason: ReasonPodLost, Message: msg}
		}
		switch w := cs.State.Waiting; stuckWaiting(w, now.Sub(since), pullGrace) {
		case api.ReasonImagePull:
			return &executor.Fault{Reason: api.ReasonImagePull, Message: fmt.Sprintf("image %s: %s: %s", cs.Image, w.Reason, w.Message)}
		case api.ReasonExecutor:
			return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("%s: %s", w.Reason, w.Message)}
		}
	}
	if f := builderFault(pod, now, since, pullGrace); f != nil {
		return f
	}
	if f := serviceFault(pod, now, since, pullGrace); f != nil {
		return f
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		msg := fmt.Sprintf("the job pod ended (phase %s)", pod.Status.Phase)
		if pod.Status.Reason != "" {
			msg += ": " + pod.Status.Reason + " " + pod.Status.Message
		}
		return &executor.Fault{Reason: ReasonPodLost, Message: strings.TrimSpace(msg)}
	case corev1.PodPending:
		if pending > 0 && now.Sub(since) >= pending && !scheduled(pod) {
			msg := "the job pod was not scheduled within " + pending.String()
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Message != "" {
					msg += ": " + c.Message
				}
			}
			return &executor.Fault{Reason: ReasonUnschedulable, Message: msg}
		}
	}
	return nil
}

// stuckWaiting classifies a container that waits for what will not come:
// api.ReasonImagePull for an image that cannot be pulled (at once for a
// name that never can be, InvalidImageName and ErrImageNeverPull; once
// waited reaches pullGrace for ErrImagePull and ImagePullBackOff, which a
// registry's hiccup also shows), api.ReasonExecutor for a container the
// kubelet cannot create or start (CreateContainerConfigError,
// CreateContainerError, RunContainerError); "" for any other wait and for
// w nil. The reasons are the kubelet's ContainerStateWaiting.Reason.
func stuckWaiting(w *corev1.ContainerStateWaiting, waited, pullGrace time.Duration) string {
	if w == nil {
		return ""
	}
	switch w.Reason {
	case "InvalidImageName", "ErrImageNeverPull":
		return api.ReasonImagePull
	case "ErrImagePull", "ImagePullBackOff":
		if waited >= pullGrace {
			return api.ReasonImagePull
		}
	case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
		return api.ReasonExecutor
	}
	return ""
}

// lastEnd is how a container ended: its state's termination or, for one
// the kubelet restarted, its last one (lastState.terminated); nil for a
// container that runs or waits as first started.
func lastEnd(cs corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	if t := cs.State.Terminated; t != nil || cs.RestartCount == 0 {
		return t
	}
	return cs.LastTerminationState.Terminated
}

// scheduled reports whether the pod has a node.
func scheduled(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobStatus is the status of the job container, nil before the kubelet
// reported one.
func jobStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == Container {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// running reports whether the job container runs.
func running(pod *corev1.Pod) bool {
	cs := jobStatus(pod)
	return pod != nil && pod.Status.Phase == corev1.PodRunning && cs != nil && cs.State.Running != nil
}

// pendingNote describes a Pending pod's wait for the setup log: the
// scheduler's message or the container's waiting reason; "" when there is
// nothing to say.
func pendingNote(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	if note := serviceNote(pod); note != "" {
		return note
	}
	if cs := jobStatus(pod); cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason != "ContainerCreating" && cs.State.Waiting.Reason != "PodInitializing" {
		return strings.TrimSpace(cs.State.Waiting.Reason + " " + cs.State.Waiting.Message)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace(c.Reason + " " + c.Message)
		}
	}
	return ""
}

// execFormatFault is the fault of a job container whose program cannot
// execute on its node (the kernel's ENOEXEC, "exec format error": an
// image, or a step agent, built for another architecture than the
// node's), from the runtime's message or the end of the container's log
// (FallbackToLogsOnError); nil otherwise. Never pod-lost after a wait:
// the run ends at once, naming it.
func execFormatFault(cs *corev1.ContainerStatus) *executor.Fault {
	var msg string
	switch {
	case cs.State.Terminated != nil:
		msg = cs.State.Terminated.Message
	case cs.State.Waiting != nil:
		msg = cs.State.Waiting.Message
	}
	if !strings.Contains(strings.ToLower(msg), "exec format error") {
		return nil
	}
	return &executor.Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf(
		"the job container cannot execute on its node: exec format error: the image %s (or the step agent) is built for another architecture than the node's; pick an image for the node's architecture, or the nodes with --node-selector kubernetes.io/arch=ARCH or the workflow's arch: (%s)",
		cs.Image, strings.TrimSpace(lastLine(msg)))}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// disruptionFault is the fault of a job pod disrupted for reason (a
// DisruptionTarget condition's reason, or an event's): preempted for the
// scheduler's preemption (PreemptionByScheduler, an event Preempted), so
// that a person and a retry rule can tell it from an eviction; evicted
// for every other (EvictionByEvictionAPI: a drain; TerminationByKubelet:
// the node's pressure or shutdown; DeletionByTaintManager: a NoExecute
// taint).
func disruptionFault(reason, message string) *executor.Fault {
	what, r := "evicted", api.ReasonEvicted
	switch reason {
	case corev1.PodReasonPreemptionByScheduler, "Preempted", "Preempting":
		what, r = "preempted by the scheduler for a pod of higher priority", api.ReasonPreempted
	case "EvictionByEvictionAPI":
		what = "evicted through the Eviction API (a drain, or kubectl evict)"
	case corev1.PodReasonTerminationByKubelet:
		what = "evicted by the kubelet"
	case "DeletionByTaintManager":
		what = "evicted by a NoExecute taint of its node"
	}
	msg := "the job pod was " + what
	if reason != "" {
		msg += " (" + reason + ")"
	}
	if m := strings.TrimSpace(message); m != "" {
		msg += ": " + m
	}
	return &executor.Fault{Reason: r, Message: msg}
}

// initFault is the fault of a job pod whose init container (never the
// runner's: one an admission webhook or policy added) failed or cannot
// start: its name, exit code and the kubelet's message, so that the
// operator finds what added it; nil when none did.
func initFault(pod *corev1.Pod) *executor.Fault {
	for _, ic := range pod.Status.InitContainerStatuses {
		if serviceName(ic.Name) != "" || ic.Name == BuilderContainer {
			continue // the run's own services and builder: serviceFault, builderFault
		}
		if t := ic.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := fmt.Sprintf("the init container %q (image %s; not the runner's: added by an admission webhook or policy?) exited with code %d (%s)", ic.Name, ic.Image, t.ExitCode, t.Reason)
			if m := strings.TrimSpace(t.Message); m != "" {
				msg += ": " + m
			}
			return &executor.Fault{Reason: api.ReasonExecutor, Message: msg}
		}
		if w := ic.State.Waiting; w != nil {
			switch w.Reason {
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "InvalidImageName", "ErrImageNeverPull":
				return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("the init container %q (image %s; not the runner's) cannot start: %s: %s", ic.Name, ic.Image, w.Reason, w.Message)}
			}
		}
	}
	return nil
}
