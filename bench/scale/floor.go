package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/remotecommand"

	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/test/kwok"
)

// floorLabel marks the floor's pods: "pod" for its job pods (PodHost
// runs them as it runs the runners'), and, with kwok.FillerLabel=floor,
// its orphans (PodHost leaves those alone).
const floorLabel = "bench.knotless.dev/floor"

// floor is bare client-go as user kwok.FloorUser, at the runners' request
// rate together (kube.DefaultQPS and DefaultBurst each): what the same
// API calls cost without Knotless.
type floor struct {
	cfg *rest.Config
	cs  *kubernetes.Clientset
}

func newFloor(cp *kwok.ControlPlane, runners int) (*floor, error) {
	cfg := &rest.Config{Host: cp.Server, BearerToken: kwok.FloorToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS: float32(kube.DefaultQPS * runners), Burst: kube.DefaultBurst * runners}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &floor{cfg: cfg, cs: cs}, nil
}

// floorPhase does with bare client-go what the runs did, on the same
// control plane: r.Runs pods of the spec of the first job pod a runner
// made, runners × capacity at once, each created, seen Running through a
// watch (one informer), sent the step agent's bytes in one exec through
// the API server to kwok (which runs `head -c SIZE >/dev/null; date`
// in the pod; retried every 250 ms for up to a minute while kwok answers
// that it knows no exec for the pod yet, as the runner retries), and
// deleted. Then, with o.orphans > 0, a bare sweep: that many pods listed
// and deleted (100 requests under way at most; the client's rate limit
// bounds them) until none is left.
func floorPhase(ctx context.Context, o options, cp *kwok.ControlPlane, host *kwok.PodHost, h *harness, r *Report) error {
	tmpl := host.FirstPod()
	if tmpl == nil {
		return fmt.Errorf("floor: no job pod of a runner was seen to copy")
	}
	agentBin, err := os.ReadFile(filepath.Join(o.bin, "knotless-agent"))
	if err != nil {
		return fmt.Errorf("floor: the step agent's bytes: %w", err)
	}
	f, err := newFloor(cp, o.runners)
	if err != nil {
		return err
	}
	running := newRunningWatch()
	fctx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	inf := informers.NewSharedInformerFactoryWithOptions(f.cs, 0, informers.WithNamespace(kwok.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = floorLabel + "=pod" }))
	if _, err := inf.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    running.saw,
		UpdateFunc: func(_, o any) { running.saw(o) },
	}); err != nil {
		return err
	}
	inf.Start(fctx.Done())
	inf.WaitForCacheSync(fctx.Done())

	n, at := r.Runs, o.capacity*o.runners
	progress("floor: %d pods of the runners' spec through bare client-go, %d at once", n, at)
	t0 := time.Now()
	execs := make([]time.Duration, n)
	attempts := make([]int, n)
	errs := make([]error, n)
	sem := make(chan struct{}, at)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			execs[i], attempts[i], errs[i] = f.onePod(ctx, tmpl, fmt.Sprintf("floor-%d", i), running, agentBin)
		}()
	}
	wg.Wait()
	r.FloorPods, r.FloorSeconds = n, time.Since(t0).Seconds()
	failed := 0
	var firstErr error
	for _, err := range errs {
		if err != nil {
			failed++
			firstErr = cmpErr(firstErr, err)
		}
	}
	r.FloorFailed = failed
	var ds []time.Duration
	tries := 0
	for i, d := range execs {
		if errs[i] == nil {
			ds = append(ds, d)
		}
		tries += attempts[i]
	}
	r.FloorExecP50, r.FloorExecP99 = ms(percentile(ds, 50)), ms(percentile(ds, 99))
	r.FloorExecAttempts = float64(tries) / float64(n)
	r.FloorCreatedToRunningP50, r.FloorCreatedToRunningP99 = createdToRunning(host, func(l map[string]string) bool { return l[floorLabel] == "pod" })
	time.Sleep(2 * time.Second) // the audit log's batch
	counts, creates, err := requests(cp.AuditLog, kwok.FloorUser, t0, time.Now())
	if err != nil {
		return err
	}
	r.FloorRequestsPerPod, r.FloorByVerb = float64(total(counts))/float64(n), perRun(counts, n)
	r.FloorPodsPerSecond, r.FloorPeakPodsPerSecond = createRate(creates)
	progress("floor: %d pods in %.1f s (%d failed), %.1f created a second", n, r.FloorSeconds, failed, r.FloorPodsPerSecond)
	if failed > 0 {
		return fmt.Errorf("floor: %d of %d pods failed; the first: %w", failed, n, firstErr)
	}
	if o.orphans == 0 {
		return nil
	}
	return f.sweep(ctx, o.orphans, cp, h, r)
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// onePod creates pod name of tmpl's spec, waits until the watch sees it
// Running, execs into it once (with retries while kwok knows no exec for
// it) sending agent, and deletes it. It returns the exec's time, from
// the first attempt to the last's end, and its attempts.
func (f *floor) onePod(ctx context.Context, tmpl *corev1.Pod, name string, running *runningWatch, agent []byte) (time.Duration, int, error) {
	spec := tmpl.Spec.DeepCopy()
	spec.NodeName = ""
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{floorLabel: "pod"}}, Spec: *spec}
	seen := running.wait(name)
	if _, err := f.cs.CoreV1().Pods(kwok.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return 0, 0, fmt.Errorf("create pod %s: %w", name, err)
	}
	defer func() {
		_ = f.cs.CoreV1().Pods(kwok.Namespace).Delete(context.WithoutCancel(ctx), name,
			metav1.DeleteOptions{GracePeriodSeconds: new(int64), PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)})
	}()
	select {
	case <-seen:
	case <-time.After(2 * time.Minute):
		return 0, 0, fmt.Errorf("pod %s not seen Running in 2 minutes", name)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	argv := []string{"/bin/sh", "-c", fmt.Sprintf("head -c %d >/dev/null; date +%%s%%N", len(agent))}
	t0 := time.Now()
	deadline := t0.Add(time.Minute)
	for attempt := 1; ; attempt++ {
		out, err := f.exec(ctx, name, spec.Containers[0].Name, argv, agent)
		if err == nil && strings.TrimSpace(out) == "" {
			err = fmt.Errorf("the exec printed nothing")
		}
		if err == nil {
			return time.Since(t0), attempt, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return time.Since(t0), attempt, fmt.Errorf("exec in pod %s (%d attempts): %w", name, attempt, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func ptrTo[T any](v T) *T { return &v }

// exec runs argv in container of pod with stdin, through the API server's
// pods/exec (WebSocket, SPDY when the upgrade fails, as kubectl does),
// and returns its STDOUT.
func (f *floor) exec(ctx context.Context, pod, container string, argv []string, stdin []byte) (string, error) {
	req := f.cs.CoreV1().RESTClient().Post().Namespace(kwok.Namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(f.cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(f.cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", err
	}
	var out, errOut bytes.Buffer
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := ex.StreamWithContext(ectx, remotecommand.StreamOptions{Stdin: bytes.NewReader(stdin), Stdout: &out, Stderr: &errOut}); err != nil {
		return "", fmt.Errorf("%w (stderr %q)", err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// sweep creates n pods labelled kwok.FillerLabel=floor (PodHost leaves
// them alone), then times one list and their deletes, up to 100 under
// way (the client's rate limit holds them), until the last is gone.
func (f *floor) sweep(ctx context.Context, n int, cp *kwok.ControlPlane, h *harness, r *Report) error {
	sel := kwok.FillerLabel + "=floor"
	if err := h.fillWith(ctx, n, func(i int) (string, map[string]string) {
		return fmt.Sprintf("floor-orphan-%d", i), map[string]string{floorLabel: "orphan", kwok.FillerLabel: "floor"}
	}); err != nil {
		return err
	}
	if err := waitCount(ctx, h, sel, n); err != nil {
		return err
	}
	progress("floor: sweeping %d orphans with bare client-go", n)
	t0 := time.Now()
	list, err := f.cs.CoreV1().Pods(kwok.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("floor sweep: list: %w", err)
	}
	sem := make(chan struct{}, 100)
	var wg sync.WaitGroup
	errs := make([]error, len(list.Items))
	for i, p := range list.Items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f.cs.CoreV1().Pods(kwok.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(1)),
				PropagationPolicy: ptrTo(metav1.DeletePropagationBackground), Preconditions: &metav1.Preconditions{UID: &p.UID}})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("floor sweep: %w", err)
		}
	}
	if err := waitCount(ctx, h, sel, 0); err != nil {
		return err
	}
	r.FloorSweepSeconds = time.Since(t0).Seconds()
	time.Sleep(2 * time.Second) // the audit log's batch
	counts, _, err := requests(cp.AuditLog, kwok.FloorUser, t0, time.Now())
	if err != nil {
		return err
	}
	r.FloorSweepRequests = total(counts)
	progress("floor: swept %d orphans in %.1f s", n, r.FloorSweepSeconds)
	return nil
}

// runningWatch tells waiters when the informer sees their pod Running.
type runningWatch struct {
	mu      sync.Mutex
	waiters map[string]chan struct{}
}

func newRunningWatch() *runningWatch { return &runningWatch{waiters: map[string]chan struct{}{}} }

// wait returns a channel closed once pod name is seen Running.
func (w *runningWatch) wait(name string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := make(chan struct{})
	w.waiters[name] = c
	return c
}

func (w *runningWatch) saw(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Status.Phase != corev1.PodRunning {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.waiters[p.Name]; ok {
		close(c)
		delete(w.waiters, p.Name)
	}
}

// createdToRunning is, over the pods PodHost saw whose labels match, the
// time from PodHost's informer first seeing a pod to seeing it Running:
// p50 and p99 in ms. One informer's clock for both, so Knotless' pods and
// the floor's are timed alike.
func createdToRunning(host *kwok.PodHost, match func(map[string]string) bool) (p50, p99 float64) {
	var ds []time.Duration
	for _, t := range host.Times() {
		if match(t.Labels) && !t.Running.IsZero() {
			ds = append(ds, t.Running.Sub(t.Created))
		}
	}
	return ms(percentile(ds, 50)), ms(percentile(ds, 99))
}
