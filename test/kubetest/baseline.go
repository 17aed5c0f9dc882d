package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"knotless.dev/knotless/internal/executor/kube"
)

// BaselinePoll is the default interval between a Baseline's pod Gets.
const BaselinePoll = 20 * time.Millisecond

// Baseline is the bare client-go loop that the cluster's floor figures
// (BENCH.md) and a kube executor's figures are compared with: one rest.Config
// and one clientset, made once and reused for every call; pods polled with
// Get every Poll (no watch, no event lookups); exec through the WebSocket
// executor (protocol v5) with kubectl's fallback to SPDY; deletion with
// background propagation.
//
// A Baseline is safe for concurrent use when its fields are not changed.
// Every duration it returns is wall-clock time measured on the client, from
// just before the first request to just after the last response.
type Baseline struct {
	// Config is the REST config every request and exec uses (e.g. a runner
	// ServiceAccount's, from ServiceAccountKubeconfig). Not copied: the
	// clientset is built from it once, by NewBaseline.
	Config *rest.Config
	// Client is the clientset built from Config.
	Client kubernetes.Interface
	// Namespace is where pods are created.
	Namespace string
	// Pod returns the pod to create in namespace; nil means
	// RestrictedPod(namespace, "") (job-base, `sleep 3600`, grace 1 s).
	Pod func(namespace string) *corev1.Pod
	// Poll is the interval between Gets while waiting; 0 means BaselinePoll.
	Poll time.Duration
	// DeleteGracePeriod, when not nil, is the deletion's
	// DeleteOptions.GracePeriodSeconds (0: the kubelet kills the
	// containers at once, as a kube executor does once its agent has ended
	// everything); nil leaves the pod's own terminationGracePeriodSeconds.
	DeleteGracePeriod *int64
}

// NewBaseline returns a Baseline creating pods in namespace through cfg,
// with one clientset built from cfg now.
func NewBaseline(cfg *rest.Config, namespace string) (*Baseline, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("baseline: make client: %w", err)
	}
	return &Baseline{Config: cfg, Client: client, Namespace: namespace}, nil
}

// BareRun is the breakdown of one Baseline.Run; Total is the sum of the
// three phases.
type BareRun struct {
	Pod    string        // the pod's generated name
	Start  time.Duration // create request → pod seen Running and Ready
	Exec   time.Duration // one exec of `true`: upgrade → exit status 0
	Delete time.Duration // delete request → Get answers NotFound
	Total  time.Duration // Start + Exec + Delete
}

func (b *Baseline) poll() time.Duration {
	if b.Poll > 0 {
		return b.Poll
	}
	return BaselinePoll
}

// CreateRunning creates a pod (b.Pod) and polls it with Get every b.Poll
// until it is Running with every container running and the Ready
// condition True. It returns the pod's name and the time from the create
// request to the Get that saw it ready. It fails early when PodRunning
// would (the pod ended, vanished or a container waits for a hopeless
// reason), and when ctx ends; the pod is then left for the caller (its
// name is returned when it was created).
func (b *Baseline) CreateRunning(ctx context.Context) (string, time.Duration, error) {
	mk := b.Pod
	if mk == nil {
		mk = func(ns string) *corev1.Pod { return RestrictedPod(ns, "") }
	}
	pods := b.Client.CoreV1().Pods(b.Namespace)
	start := time.Now()
	pod, err := pods.Create(ctx, mk(b.Namespace), metav1.CreateOptions{})
	if err != nil {
		return "", 0, fmt.Errorf("baseline: create pod: %w", err)
	}
	tick := time.NewTicker(b.poll())
	defer tick.Stop()
	for {
		done, err := PodRunning.Done(pod)
		if err != nil {
			return pod.Name, 0, fmt.Errorf("baseline: pod %s: %w", pod.Name, err)
		}
		if done && podReady(pod) {
			return pod.Name, time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return pod.Name, 0, fmt.Errorf("baseline: wait for pod %s Running (last phase %s): %w", pod.Name, pod.Status.Phase, ctx.Err())
		case <-tick.C:
		}
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			p = nil
		case err != nil && ctx.Err() == nil:
			continue // transient; try again at the next tick
		case err != nil:
			return pod.Name, 0, fmt.Errorf("baseline: get pod %s: %w", pod.Name, err)
		}
		if p == nil {
			return pod.Name, 0, fmt.Errorf("baseline: pod %s vanished", pod.Name)
		}
		pod = p
	}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Executor returns the executor Exec uses for argv in the pod's
// MainContainer: WebSocket (v5) first, SPDY when the upgrade is refused or
// a proxy cannot carry it (kubectl's choice). stdin says whether the
// command gets a STDIN stream. Each WebSocket exec dials a new connection
// (one TCP connect and TLS handshake); that is client-go's design, not a
// choice of this function.
func (b *Baseline) Executor(pod string, argv []string, stdin bool) (remotecommand.Executor, error) {
	return newExecutor(b.Config, b.Client, b.Namespace, pod, MainContainer, argv, stdin)
}

func newExecutor(cfg *rest.Config, client kubernetes.Interface, namespace, pod, container string, argv []string, stdin bool) (remotecommand.Executor, error) {
	return kube.PodExec(cfg, client, namespace, pod, container, argv, stdin)
}

// Exec runs argv (no shell) once in pod's MainContainer with the given
// streams (a nil Stdin means no STDIN stream; nil Stdout/Stderr discard) and
// returns the time from the upgrade request to the exit status, and the
// command's exit code (-1 with an error when the stream failed; a non-zero
// exit is not an error).
func (b *Baseline) Exec(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (time.Duration, int, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	start := time.Now()
	exe, err := b.Executor(pod, argv, stdin != nil)
	if err != nil {
		return 0, -1, fmt.Errorf("baseline: exec in %s: %w", pod, err)
	}
	err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	d := time.Since(start)
	if err == nil {
		return d, 0, nil
	}
	var exit utilexec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		return d, exit.ExitStatus(), nil
	}
	return d, -1, fmt.Errorf("baseline: exec %q in %s: %w", argv, pod, err)
}

// ExecTrue runs `true` once in pod (no STDIN) and returns the round trip:
// upgrade request → exit status 0.
func (b *Baseline) ExecTrue(ctx context.Context, pod string) (time.Duration, error) {
	d, code, err := b.Exec(ctx, pod, []string{"true"}, nil, nil, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("baseline: `true` exited %d in %s", code, pod)
	}
	return d, err
}

// DeleteGone deletes pod with background propagation (and
// b.DeleteGracePeriod, else the pod's own grace period) and polls Get every b.Poll until it answers NotFound. It
// returns the time from the delete request to that answer.
func (b *Baseline) DeleteGone(ctx context.Context, pod string) (time.Duration, error) {
	pods := b.Client.CoreV1().Pods(b.Namespace)
	background := metav1.DeletePropagationBackground
	start := time.Now()
	err := pods.Delete(ctx, pod, metav1.DeleteOptions{PropagationPolicy: &background, GracePeriodSeconds: b.DeleteGracePeriod})
	if apierrors.IsNotFound(err) {
		return time.Since(start), nil
	}
	if err != nil {
		return 0, fmt.Errorf("baseline: delete pod %s: %w", pod, err)
	}
	tick := time.NewTicker(b.poll())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("baseline: wait for pod %s gone: %w", pod, ctx.Err())
		case <-tick.C:
		}
		_, err := pods.Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return time.Since(start), nil
		}
	}
}

// Run is one bare run, the floor a kube executor's one-step run (a pod, one
// step, cleanup) is compared with: create the pod and wait until it is
// Running and Ready, exec `true` once, delete it and wait until it is gone.
// On error the pod, if created, is deleted (without waiting) before
// returning.
func (b *Baseline) Run(ctx context.Context) (BareRun, error) {
	var r BareRun
	var err error
	r.Pod, r.Start, err = b.CreateRunning(ctx)
	if err == nil {
		r.Exec, err = b.ExecTrue(ctx, r.Pod)
	}
	if err != nil {
		if r.Pod != "" {
			background := metav1.DeletePropagationBackground
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = b.Client.CoreV1().Pods(b.Namespace).Delete(dctx, r.Pod, metav1.DeleteOptions{PropagationPolicy: &background})
			cancel()
		}
		return r, err
	}
	if r.Delete, err = b.DeleteGone(ctx, r.Pod); err != nil {
		return r, err
	}
	r.Total = r.Start + r.Exec + r.Delete
	return r, nil
}
