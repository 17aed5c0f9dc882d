package kubetest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	// JobBaseImage is the job base image test/cluster imports: busybox-static
	// applets, /tmp 1777, image USER 1000. Never pulled (pull policy Never).
	JobBaseImage = "localhost/knotless/job-base:1"
	// JobRootImage is JobBaseImage whose default user is root (0:0): a pod
	// from it runs as root unless the pod sets runAsUser, and Pod Security
	// "restricted" refuses runAsUser 0 (test/cluster's JobRootImage).
	JobRootImage = "localhost/knotless/job-root:1"
	// JobNoTarImage has /bin/sh (dash), cat, head, wc, mkdir, rm, ls,
	// chmod, sleep, true and env, and no tar nor busybox; image USER 1000
	// (test/cluster's JobNoTarImage).
	JobNoTarImage = "localhost/knotless/job-notar:1"
	// JobOwnPathImage has `go` and `hello` only on its own PATH
	// (/usr/local/go/bin, /opt/t/bin), as golang's image has go
	// (test/cluster's JobOwnPathImage).
	JobOwnPathImage = "localhost/knotless/job-ownpath:1"
	// JobFakeArmImage's `uname -m` says aarch64 on this amd64 node
	// (test/cluster's JobFakeArmImage).
	JobFakeArmImage = "localhost/knotless/job-fakearm:2"
	// JobPostgresImage is JobBaseImage with PostgreSQL: psql for steps,
	// and pg-service, which runs a database on 127.0.0.1:5432 (a password
	// from $POSTGRES_PASSWORD when set) (test/cluster's JobPostgresImage).
	JobPostgresImage = "localhost/knotless/job-postgres:2"
	// JobArm64OnlyImage's /bin/sh is an arm64 program: its PID 1 cannot
	// execute here (test/cluster's JobArm64OnlyImage).
	JobArm64OnlyImage = "localhost/knotless/job-arm64only:1"
	// MainContainer is the name of RestrictedPod's only container.
	MainContainer = "main"
	// UID is the user and group id RestrictedPod runs as.
	UID = 1000

	// PodStartTimeout bounds waits for a pod to reach Running: generous,
	// because the node has 2 cores that a Kubernetes build may be using.
	PodStartTimeout = 2 * time.Minute
)

// Resources of RestrictedPod's container (requests = limits, QoS
// Guaranteed) and the size limit of its /tmp emptyDir, which counts
// towards the ephemeral-storage limit. Read-only: RestrictedPod copies
// them (a Quantity caches its string form, so sharing one races).
var (
	PodCPU              = resource.MustParse("100m")
	PodMemory           = resource.MustParse("64Mi")
	PodEphemeralStorage = resource.MustParse("128Mi")
	TmpSizeLimit        = resource.MustParse("64Mi")
)

// RestrictedPod returns a pod that passes Pod Security "restricted" and
// the hardening a runner applies to job pods: one container MainContainer
// from JobBaseImage (pull policy Never) running `sleep 3600`, as uid/gid
// 1000 with runAsNonRoot, a read-only root file system, all capabilities
// dropped, no privilege escalation, seccomp RuntimeDefault, no
// ServiceAccount token, requests = limits for cpu, memory and
// ephemeral-storage, a writable emptyDir at /tmp (sizeLimit TmpSizeLimit),
// and a 1 s termination grace period (sleep as PID 1 ignores SIGTERM).
// An empty name makes the API server generate one (prefix "pod-").
// Callers change the returned pod freely.
func RestrictedPod(namespace, name string) *corev1.Pod {
	res := func() corev1.ResourceList {
		return corev1.ResourceList{
			corev1.ResourceCPU:              PodCPU.DeepCopy(),
			corev1.ResourceMemory:           PodMemory.DeepCopy(),
			corev1.ResourceEphemeralStorage: PodEphemeralStorage.DeepCopy(),
		}
	}
	tmpLimit := TmpSizeLimit.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    map[string]string{TestLabel: "kubetest"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](UID),
				RunAsGroup:     ptr.To[int64](UID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            MainContainer,
				Image:           JobBaseImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sleep", "3600"},
				Resources:       corev1.ResourceRequirements{Requests: res(), Limits: res()},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					RunAsUser:                ptr.To[int64](UID),
					RunAsGroup:               ptr.To[int64](UID),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{{
				Name:         "tmp",
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &tmpLimit}},
			}},
		},
	}
	if name == "" {
		pod.GenerateName = "pod-"
	}
	return pod
}

// PodCondition is what WaitPod waits for. Done gets the pod's latest
// state, or nil when the pod does not exist; it returns true when the wait
// is over, or an error to end it early (the state can no longer come).
type PodCondition struct {
	What string // what is awaited, for messages: "Running"
	Done func(pod *corev1.Pod) (bool, error)
}

// PodRunning waits for phase Running with every container running. It
// ends early if the pod ends, vanishes, or a container waits for a reason
// that does not go away by itself (bad image, config error, crash loop).
var PodRunning = PodCondition{
	What: "phase Running with all containers running",
	Done: func(pod *corev1.Pod) (bool, error) {
		if pod == nil {
			return false, fmt.Errorf("pod does not exist")
		}
		switch pod.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			return false, fmt.Errorf("pod ended in phase %s", pod.Status.Phase)
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && hopeless[w.Reason] {
				return false, fmt.Errorf("container %s waiting: %s: %s", cs.Name, w.Reason, w.Message)
			}
		}
		if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) {
			return false, nil
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Running == nil {
				return false, nil
			}
		}
		return true, nil
	},
}

// hopeless are container waiting reasons that need a change to the pod.
var hopeless = map[string]bool{
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"ErrImagePull":               true,
	"ImagePullBackOff":           true,
	"CrashLoopBackOff":           true,
	"RunContainerError":          true,
}

// PodPhase waits for the given phase (and, if reason is not empty, for
// status.reason == reason). It ends early if the pod vanishes or reaches
// another terminal phase.
func PodPhase(phase corev1.PodPhase, reason string) PodCondition {
	what := "phase " + string(phase)
	if reason != "" {
		what += " with reason " + reason
	}
	return PodCondition{What: what, Done: func(pod *corev1.Pod) (bool, error) {
		if pod == nil {
			return false, fmt.Errorf("pod does not exist")
		}
		if pod.Status.Phase == phase {
			if reason == "" || pod.Status.Reason == reason {
				return true, nil
			}
			if phase == corev1.PodFailed || phase == corev1.PodSucceeded {
				return false, fmt.Errorf("pod in phase %s with reason %q", phase, pod.Status.Reason)
			}
			return false, nil
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod ended in phase %s", pod.Status.Phase)
		}
		return false, nil
	}}
}

// PodGone waits until the pod no longer exists.
var PodGone = PodCondition{
	What: "pod deleted",
	Done: func(pod *corev1.Pod) (bool, error) { return pod == nil, nil },
}

// WaitPod waits until cond is met by pod namespace/name, watching it
// through client (and polling if client may not watch), until ctx ends.
// It returns the pod's last state (nil if it does not exist). On failure
// the error says what was awaited, the pod's last status, and its latest
// events (if client may list events).
func WaitPod(ctx context.Context, client kubernetes.Interface, namespace, name string, cond PodCondition) (*corev1.Pod, error) {
	pods := client.CoreV1().Pods(namespace)
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	var last *corev1.Pod
	fail := func(err error) (*corev1.Pod, error) {
		return last, fmt.Errorf("wait for pod %s/%s: %s: %w\n%s", namespace, name, cond.What, err,
			describePod(client, namespace, name, last))
	}
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				return fail(err)
			}
			if err := sleep(ctx, 250*time.Millisecond); err != nil {
				return fail(err)
			}
			continue
		}
		last = nil
		if len(list.Items) > 0 {
			last = &list.Items[0]
		}
		if done, err := cond.Done(last); done || err != nil {
			if err != nil {
				return fail(err)
			}
			return last, nil
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion,
			AllowWatchBookmarks: true})
		if err != nil {
			// No watch permission or a transient error: poll instead.
			if err := sleep(ctx, 250*time.Millisecond); err != nil {
				return fail(err)
			}
			continue
		}
		done, err := drainWatch(ctx, w, &last, cond)
		w.Stop()
		if done {
			return last, nil
		}
		if err != nil {
			return fail(err)
		}
	}
}

// drainWatch feeds w's events to cond until it is met (true), fails or ctx
// ends (error), or the watch closes or errs (false, nil: list again).
func drainWatch(ctx context.Context, w watch.Interface, last **corev1.Pod, cond PodCondition) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					*last = p
				}
			case watch.Deleted:
				*last = nil
			case watch.Error:
				return false, nil
			default:
				continue
			}
			if done, err := cond.Done(*last); done || err != nil {
				return done, err
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// describePod renders the pod's status and its latest events for a
// failure message. It uses a fresh context: the caller's has often ended.
func describePod(client kubernetes.Interface, namespace, name string, pod *corev1.Pod) string {
	var b strings.Builder
	if pod == nil {
		b.WriteString("  last seen: pod does not exist\n")
	} else {
		st := pod.Status
		fmt.Fprintf(&b, "  last seen: phase=%s reason=%q message=%q node=%q podIP=%s qos=%s\n",
			st.Phase, st.Reason, st.Message, pod.Spec.NodeName, st.PodIP, st.QOSClass)
		for _, c := range st.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		for _, cs := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
			fmt.Fprintf(&b, "  container %s: ready=%v restarts=%d %s\n", cs.Name, cs.Ready, cs.RestartCount, containerState(cs.State))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": name}.String(),
	})
	if err != nil {
		fmt.Fprintf(&b, "  events: %v\n", err)
		return b.String()
	}
	items := evs.Items
	sort.SliceStable(items, func(i, j int) bool { return eventTime(items[i]).Before(eventTime(items[j])) })
	if len(items) > 12 {
		items = items[len(items)-12:]
	}
	if len(items) == 0 {
		b.WriteString("  events: none\n")
	}
	for _, e := range items {
		fmt.Fprintf(&b, "  event %s %s %s: %s (x%d)\n", eventTime(e).Format(time.TimeOnly), e.Type, e.Reason,
			strings.TrimSpace(e.Message), max(e.Count, 1))
	}
	return b.String()
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Waiting != nil:
		return fmt.Sprintf("waiting %s: %s", s.Waiting.Reason, s.Waiting.Message)
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.Format(time.TimeOnly)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated exit=%d reason=%s signal=%d: %s", s.Terminated.ExitCode,
			s.Terminated.Reason, s.Terminated.Signal, s.Terminated.Message)
	}
	return "no state"
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// WaitPod is WaitPod with the admin client, bounded by timeout, failing the
// test with the full message when the condition is not met.
func (c *Cluster) WaitPod(t testing.TB, namespace, name string, cond PodCondition, timeout time.Duration) *corev1.Pod {
	t.Helper()
	pod, err := WaitPod(stepContext(t, timeout), c.Client, namespace, name, cond)
	if err != nil {
		t.Fatalf("%v\n  (wait limit %s)", err, timeout)
	}
	return pod
}

// StartPod creates pod through client (the identity under test, e.g. a
// ServiceAccount's) and waits with the admin client, at most
// PodStartTimeout, until it is Running. It returns the running pod.
func (c *Cluster) StartPod(t testing.TB, client kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := client.CoreV1().Pods(pod.Namespace).Create(stepContext(t, time.Minute), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s%s: %v", pod.Namespace, pod.Name, pod.GenerateName, err)
	}
	return c.WaitPod(t, created.Namespace, created.Name, PodRunning, PodStartTimeout)
}
