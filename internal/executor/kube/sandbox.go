package kube

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// The kubelet's event when the container runtime cannot make a pod's
// sandbox (the pod's network namespace, its pause container, or with a
// RuntimeClass the sandboxed runtime's VM or kernel). The kubelet retries
// it for ever: the pod stays Pending, its container ContainerCreating,
// and its status never says why.
const eventFailedSandbox = "FailedCreatePodSandBox"

// sandboxGrace is how long sandbox failures other than a missing handler
// are retried before the run ends: a network plugin may fail for a few
// seconds while it starts; a runtime that cannot start a sandbox at all
// fails the same way a minute later.
const sandboxGrace = time.Minute

// sandboxPoll is how long after its first read a scheduled pod that does
// not run yet has its events read again; each later wait doubles, up to
// sandboxPollMax (nextSandboxPoll). A fixed 3 s made a burst of 100 pods
// that took ~100 s to start on a loaded node list events 26 times a run
// (2,641 of the runner's 2,941 requests; docs/scaling.md), a third of
// the default --kube-api-qps taken from the creates and execs.
const sandboxPoll = 3 * time.Second

// sandboxPollMax bounds the wait between two reads of a starting pod's
// events: a sandbox failing past sandboxGrace ends its run at most this
// much later.
const sandboxPollMax = 24 * time.Second

// nextSandboxPoll is the wait after one of every: twice it, at most
// sandboxPollMax.
func nextSandboxPoll(every time.Duration) time.Duration {
	return min(2*every, sandboxPollMax)
}

// missingHandler matches a container runtime's refusal of a RuntimeClass
// handler it does not have: containerd 1.6–2.x say `failed to get sandbox
// runtime: no runtime for "runsc" is configured`, CRI-O `no runtime
// handler "runsc"` or `runtime handler "runsc" is not supported`. The
// first group is the handler.
var missingHandler = regexp.MustCompile(`no runtime for "([^"]*)" is configured|no runtime handler "([^"]*)"|runtime handler "([^"]*)" (?:is )?not supported`)

// fixSep separates a fault's description from what to do about it in
// its message (Doctor reports them apart).
const fixSep = "; fix: "

// MissingHandlerFix says what to do about a node without the handler of
// RuntimeClass class: install the runtime and configure the handler, or
// keep job pods off such nodes.
func MissingHandlerFix(class, handler string) string {
	return fmt.Sprintf("install the runtime on every node that runs job pods and configure the handler %q in its container runtime (containerd: a [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.%s] section with its runtime_type, e.g. io.containerd.runsc.v1 for gVisor, the shim on containerd's PATH, then restart containerd), or give RuntimeClass %s a scheduling.nodeSelector matching only the nodes that have it, or run without --runtime-class",
		handler, handler, class)
}

// sandboxEventFault reads why the runtime cannot make pod's sandbox from
// the pod's events (any order): a handler the node's runtime does not have
// ends the run at once (reason executor, naming the node, the RuntimeClass,
// the handler, the runtime's words and the fix), as does a pod that asked
// for a user namespace its runtime cannot make (usernsRefusal: the node,
// the RuntimeClass, the kubelet's words); any other sandbox failure
// once it has gone on for grace since the pod was created (since). nil
// when no event says so (yet).
func sandboxEventFault(pod *corev1.Pod, events []corev1.Event, now, since time.Time, grace time.Duration) *executor.Fault {
	var last *corev1.Event
	for i := range events {
		ev := &events[i]
		if ev.Reason != eventFailedSandbox || (ev.InvolvedObject.UID != "" && ev.InvolvedObject.UID != pod.UID) {
			continue
		}
		if last == nil || eventTime(*ev).After(eventTime(*last)) {
			last = ev
		}
	}
	if last == nil {
		return nil
	}
	class := "(none)"
	if pod.Spec.RuntimeClassName != nil {
		class = *pod.Spec.RuntimeClassName
	}
	node := pod.Spec.NodeName
	if node == "" {
		node = last.Source.Host
	}
	said := strings.TrimSpace(last.Message)
	if m := missingHandler.FindStringSubmatch(said); m != nil {
		handler := m[1] + m[2] + m[3]
		return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf(
			"node %s cannot run pods of RuntimeClass %s: its container runtime has no handler %q (the kubelet: %s)%s%s",
			node, class, handler, said, fixSep, MissingHandlerFix(class, handler))}
	}
	if asksUserNamespace(pod) && usernsRefusal.MatchString(said) {
		return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf(
			"node %s cannot give the job pod a user namespace (RuntimeClass %s): the kubelet: %s%s%s",
			node, class, said, fixSep, "run job pods on nodes whose runtime gives user namespaces (containerd 2 or CRI-O 1.25, runc 1.2, Linux 6.3), or give --user-namespace auto (such pods run without one) or off")}
	}
	if now.Sub(since) < grace {
		return nil
	}
	return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf(
		"node %s could not start the job pod's sandbox for %s (RuntimeClass %s; the kubelet retries for ever): %s",
		node, now.Sub(since).Round(time.Second), class, said)}
}

// eventTime is when an event last happened, by whichever field its
// reporter set.
func eventTime(ev corev1.Event) time.Time {
	for _, t := range []time.Time{ev.LastTimestamp.Time, ev.EventTime.Time, ev.FirstTimestamp.Time, ev.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// sandboxFault lists pod's FailedCreatePodSandBox events and reads them
// (sandboxEventFault); nil when there are none or they cannot be listed
// (the Role's events list: without it such a pod waits for the run's
// timeout).
func (e *Executor) sandboxFault(ctx context.Context, pod *corev1.Pod, since time.Time) *executor.Fault {
	list, err := e.client.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.name", pod.Name),
			fields.OneTermEqualSelector("reason", eventFailedSandbox),
		).String(),
	})
	if err != nil {
		return nil
	}
	return sandboxEventFault(pod, list.Items, time.Now(), since, sandboxGrace)
}
