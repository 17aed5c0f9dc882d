package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
)

// The floor of the kube burst: what a bare client-go program pays for the
// same pods. Flags of its own, registered before main parses them.
var (
	kubeFloorOn    = flag.Bool("kube-floor", true, "kubeburst benchmark: also run the floor in the same invocation: a bare client-go program (in this process) that creates -kube-runs pods at once, the job pods' spec with a shell as PID 1, waits for each Running (one watch), execs 'cat /proc/uptime' once in each and deletes it")
	kubeFloorOrder = flag.String("kube-floor-order", "before", "kubeburst benchmark: run the floor before or after the cold burst (each starts once the namespaces hold no pod and the node's sandboxes have settled)")
)

// floorUserAgent is the floor client's User-Agent: its requests are told
// apart in the audit log by it (and by its namespace).
const floorUserAgent = "knotless-bench-floor"

// floorContainer is the floor pod's container: the job pod's name (the
// kube executor's "job").
const floorContainer = "job"

// FloorResult is the floor of a burst: Pods pods created at once by a bare
// client-go program (one clientset, the runner's default client rate
// limits: 50 requests a second, bursts of 100), each the job pod a kube
// runner with the burst's flags makes (image, resources, security
// contexts, emptyDirs, user namespace, RuntimeClass: SpecCheck says how it
// compares with the runner's real one) but for PID 1, a shell that exits
// on SIGTERM. Each pod is awaited Running through one watch of the
// namespace, then `cat /proc/uptime` runs in it once over an exec
// (WebSocket, SPDY fallback: the runner's exec), then it is deleted with
// grace period 0, as the runner deletes an ended run's pod. Durations in
// ms.
type FloorResult struct {
	Pods      int    `json:"pods"`
	Namespace string `json:"namespace"`
	// Order is "before" or "after": when the floor ran, against the cold
	// burst.
	Order    string `json:"order"`
	Running  int    `json:"podsRunning"`
	Commands int    `json:"commandsPrinted"` // execs that printed /proc/uptime
	// PodRunning is each pod's create answered → the watch saw it Running
	// (its container running): what the runner's setup log says as "pod
	// running on node … after".
	PodRunning Spread `json:"podCreatedToRunning"`
	// FirstCommand is each pod's create request sent → the /proc/uptime
	// its exec printed (the pod's clock, as the burst's steps print it).
	FirstCommand Spread `json:"createToFirstCommand"`
	// Exec is each exec's request → its exit read (client clock).
	Exec          Spread             `json:"execRequestToExit"`
	LastCommandS  float64            `json:"startToLastFirstCommandSeconds"`
	WallS         float64            `json:"startToAllGoneSeconds"`
	Requests      map[string]float64 `json:"apiRequestsPerPod"`
	Unschedulable int                `json:"podsFirstUnschedulable"`
	// SpecCheck compares the floor's pod with the runner's first job pod
	// of the cold burst as the API server's audit log has its create
	// request, metadata and command aside: "same" or the fields that
	// differ.
	SpecCheck string `json:"specAgainstRunnersJobPod"`
}

// checkFloorFlags checks -kube-floor-order.
func checkFloorFlags() error {
	if *kubeFloorOrder != "before" && *kubeFloorOrder != "after" {
		return fmt.Errorf("-kube-floor-order %q: want before or after", *kubeFloorOrder)
	}
	return nil
}

// floorPod is the pod the floor creates: the job pod podFor
// (internal/executor/kube/pod.go) makes for a run with the default run-as
// (1000:1000), the user namespace the runner asks for by default
// (--user-namespace auto), no RuntimeClass, the image's default pull
// policy, an hour's timeout, and bc's image and sizes; PID 1 is a shell
// that exits on SIGTERM instead of the agent's bootstrap.
// TestFloorPod_IsTheKubeExecutorsJobPod keeps it the executor's.
func floorPod(namespace, name, label string, bc *burstConfig) (*corev1.Pod, error) {
	q := func(flag, s string) (resource.Quantity, error) {
		v, err := resource.ParseQuantity(s)
		if err != nil {
			return v, fmt.Errorf("%s %q: %w", flag, s, err)
		}
		return v, nil
	}
	cpu, err := q("-kube-cpus", bc.cpus)
	if err != nil {
		return nil, err
	}
	mem, err := q("-kube-memory", bc.memory)
	if err != nil {
		return nil, err
	}
	disk, err := q("-kube-disk", bc.disk)
	if err != nil {
		return nil, err
	}
	res := corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, corev1.ResourceEphemeralStorage: disk}
	const uid = 1000
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range []struct{ name, path string }{
		{"knotless", "/knotless"}, {"workspace", "/workspace"}, {"home", "/home/knotless"}, {"tmp", "/tmp"},
	} {
		limit := disk.DeepCopy()
		volumes = append(volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: v.name, MountPath: v.path})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"knotless.dev/floor": label}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			ActiveDeadlineSeconds:         ptr.To[int64](3600 + 120),
			HostUsers:                     ptr.To(false),
			NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"}, // the runner's (nodeSelector)
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](uid),
				RunAsGroup:     ptr.To[int64](uid),
				FSGroup:        ptr.To[int64](uid),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:                     floorContainer,
				Image:                    bc.image,
				Command:                  []string{"/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
				WorkingDir:               "/workspace",
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				Resources:                corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					RunAsUser:                ptr.To[int64](uid),
					RunAsGroup:               ptr.To[int64](uid),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Privileged:               ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: mounts,
			}},
			Volumes: volumes,
		},
	}, nil
}

// floorPodState is one floor pod as the watch and its goroutine see it.
type floorPodState struct {
	running chan struct{} // closed when Running, or when it cannot be (err)
	gone    chan struct{} // closed when the watch saw it deleted
	runAt   time.Time
	err     error
	closed  bool
	deleted bool
}

// floorWatch follows the floor's pods with one watch of the namespace
// (list, then watch from its resourceVersion; again on a closed watch).
type floorWatch struct {
	mu   sync.Mutex
	pods map[string]*floorPodState
}

func (fw *floorWatch) seen(p *corev1.Pod, deleted bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	st := fw.pods[p.Name]
	if st == nil {
		return
	}
	if deleted {
		if !st.deleted {
			st.deleted = true
			close(st.gone)
		}
		if !st.closed {
			st.closed, st.err = true, fmt.Errorf("pod %s deleted before it ran", p.Name)
			close(st.running)
		}
		return
	}
	if st.closed {
		return
	}
	if err := floorHopeless(p); err != nil {
		st.closed, st.err = true, err
		close(st.running)
		return
	}
	if p.Status.Phase == corev1.PodRunning {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == floorContainer && cs.State.Running != nil {
				st.closed, st.runAt = true, time.Now()
				close(st.running)
			}
		}
	}
}

// floorHopeless says why p will never run, or nil.
func floorHopeless(p *corev1.Pod) error {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return fmt.Errorf("pod %s ended in phase %s: %s", p.Name, p.Status.Phase, p.Status.Message)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "CreateContainerConfigError", "CreateContainerError", "ErrImageNeverPull", "InvalidImageName",
				"ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff", "RunContainerError":
				return fmt.Errorf("pod %s: container %s waiting: %s: %s", p.Name, cs.Name, w.Reason, w.Message)
			}
		}
	}
	return nil
}

// run lists and watches the namespace's pods with selector until ctx
// ends; ready is closed once the first watch is open.
func (fw *floorWatch) run(ctx context.Context, pods floorPods, selector string, ready chan<- struct{}) {
	first := true
	for ctx.Err() == nil {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			_ = floorSleep(ctx, 250*time.Millisecond)
			continue
		}
		for i := range list.Items {
			fw.seen(&list.Items[i], false)
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			_ = floorSleep(ctx, 250*time.Millisecond)
			continue
		}
		if first {
			first = false
			close(ready)
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			switch ev.Type {
			case kwatch.Added, kwatch.Modified:
				fw.seen(p, false)
			case kwatch.Deleted:
				fw.seen(p, true)
			}
		}
		w.Stop()
	}
}

// floorPods is the pod client the floor's watch uses.
type floorPods interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (kwatch.Interface, error)
}

func floorSleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// floorPodResult is what one floor pod measured.
type floorPodResult struct {
	running, command, exec time.Duration
	commandAt              time.Time // when the command read the uptime it printed
	created, ran, printed  bool
	err                    error
}

// benchFloor runs the floor of a burst of bc.runs pods in a namespace of
// its own, once the namespaces in quiet hold no pod. It fails when a pod
// never runs or its command prints no uptime within 3 minutes and a
// second per pod (the burst's own bound); the figures gathered so far
// are returned with the error. Long because the floor's steps (quiet,
// namespace, watch, creates, execs, deletes, the audit log's count) share
// one watch and one set of timings, in order.
func benchFloor(ctx context.Context, kc *localCluster, bc *burstConfig, order string, quiet ...string) (*FloorResult, error) {
	ns, err := createBenchNamespace(ctx, kc, "kfloor-")
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	defer func() {
		_ = kc.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	}()
	res := &FloorResult{Pods: bc.runs, Namespace: ns, Order: order}
	if err := quietCluster(ctx, kc.Client, shimSettle(bc.runs), append(quiet, ns)...); err != nil {
		return res, fmt.Errorf("floor: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	if err != nil {
		return res, err
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = 50, 100, floorUserAgent // the runner's defaults (--kube-api-qps, --kube-api-burst)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	label := ns
	pods := make([]*corev1.Pod, bc.runs)
	fw := &floorWatch{pods: map[string]*floorPodState{}}
	for i := range pods {
		if pods[i], err = floorPod(ns, fmt.Sprintf("floor-%03d", i), label, bc); err != nil {
			return res, err
		}
		fw.pods[pods[i].Name] = &floorPodState{running: make(chan struct{}), gone: make(chan struct{})}
	}
	boot, err := bootTime()
	if err != nil {
		return res, err
	}
	// The audit window opens before the watch: its list is counted, as
	// the runner's informer's is.
	from := time.Now()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	ready := make(chan struct{})
	go fw.run(wctx, client.CoreV1().Pods(ns), "knotless.dev/floor="+label, ready)
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		return res, fmt.Errorf("floor: the watch of namespace %s did not open in 30 s", ns)
	case <-ctx.Done():
		return res, ctx.Err()
	}

	timeout := 3*time.Minute + time.Duration(bc.runs)*time.Second
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]floorPodResult, bc.runs)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, pod := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = floorOne(pctx, cfg, client, pod, fw.pods[pod.Name], boot)
		}()
	}
	wg.Wait()
	// Every pod made was deleted; wait for the watch to see them gone
	// (grace period 0: at once).
	for i, pod := range pods {
		if !out[i].created {
			continue
		}
		select {
		case <-fw.pods[pod.Name].gone:
		case <-time.After(time.Until(t0.Add(timeout + 30*time.Second))):
		}
	}
	end := time.Now()
	res.WallS = end.Sub(t0).Seconds()
	stopWatch()

	var running, command, exec []time.Duration
	var errs []string
	for _, r := range out {
		if r.ran {
			res.Running++
			running = append(running, r.running)
		}
		if r.printed {
			res.Commands++
			command = append(command, r.command)
			exec = append(exec, r.exec)
			res.LastCommandS = max(res.LastCommandS, r.commandAt.Sub(t0).Seconds())
		}
		if r.err != nil && len(errs) < 5 {
			errs = append(errs, r.err.Error())
		}
	}
	res.PodRunning, res.FirstCommand, res.Exec = spread(running), spread(command), spread(exec)
	a, aerr := auditScan(ctx, kc.AuditLog, ns, from, end, func(ua string) bool {
		return strings.HasPrefix(ua, floorUserAgent) || strings.HasPrefix(ua, "Go-http-client/")
	})
	if aerr == nil {
		res.Requests, res.Unschedulable = perRun(a.counts, bc.runs), len(a.unsched)
	}
	progress("kubeburst floor: %d pods, %d running, %d commands printed; create → Running p50 %.0f ms p99 %.0f ms; create → first command p50 %.0f ms p99 %.0f ms",
		bc.runs, res.Running, res.Commands, res.PodRunning.P50, res.PodRunning.P99, res.FirstCommand.P50, res.FirstCommand.P99)
	if res.Running < bc.runs || res.Commands < bc.runs {
		return res, fmt.Errorf("floor: %d of %d pods ran, %d printed their uptime: %s",
			res.Running, bc.runs, res.Commands, strings.Join(errs, "; "))
	}
	return res, aerr
}

// floorOne creates pod, waits until the watch sees it Running, runs
// `cat /proc/uptime` in it once and deletes it (grace period 0, as the
// runner deletes an ended run's pod; also on failure).
func floorOne(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, pod *corev1.Pod, st *floorPodState, boot time.Time) (r floorPodResult) {
	pods := client.CoreV1().Pods(pod.Namespace)
	start := time.Now()
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		r.err = fmt.Errorf("create pod %s: %w", pod.Name, err)
		return r
	}
	createdAt := time.Now()
	r.created = true
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err := pods.Delete(dctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
			PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
			Preconditions:     &metav1.Preconditions{UID: &created.UID}})
		if err != nil && !apierrors.IsNotFound(err) && r.err == nil {
			r.err = fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
	}()
	select {
	case <-st.running:
	case <-ctx.Done():
		r.err = fmt.Errorf("pod %s never ran: %w", pod.Name, ctx.Err())
		return r
	}
	if st.err != nil {
		r.err = st.err
		return r
	}
	r.ran, r.running = true, st.runAt.Sub(createdAt)
	e0 := time.Now()
	var stdout, stderr bytes.Buffer
	exe, err := floorExec(cfg, client, pod.Namespace, pod.Name, []string{"cat", "/proc/uptime"})
	if err == nil {
		err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	}
	r.exec = time.Since(e0)
	if err != nil {
		r.err = fmt.Errorf("exec in pod %s: %w (stderr %q)", pod.Name, err, stderr.String())
		return r
	}
	f := strings.Fields(stdout.String())
	sec, perr := 0.0, fmt.Errorf("no output")
	if len(f) > 0 {
		sec, perr = strconv.ParseFloat(f[0], 64)
	}
	if perr != nil {
		r.err = fmt.Errorf("pod %s printed %q, want /proc/uptime", pod.Name, stdout.String())
		return r
	}
	r.commandAt = boot.Add(time.Duration(sec * float64(time.Second)))
	r.printed, r.command = true, r.commandAt.Sub(start)
	return r
}

// floorExec is the runner's exec (kube.PodExec): WebSocket (v5) first,
// SPDY when the upgrade is refused or a proxy cannot carry it.
func floorExec(cfg *rest.Config, client kubernetes.Interface, namespace, pod string, argv []string) (remotecommand.Executor, error) {
	req := client.CoreV1().RESTClient().Post().
		Namespace(namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: floorContainer, Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// quietCluster waits until the namespaces hold no pod (2 minutes at most),
// then until the node's pod sandboxes have settled: the number of
// containerd shims on this machine (the node) unchanged for settle (a pod
// deleted with grace period 0 leaves the API at once, its sandbox's
// teardown goes on; a minute at most, then it goes on anyway).
func quietCluster(ctx context.Context, client kubernetes.Interface, settle time.Duration, namespaces ...string) error {
	if err := poll(ctx, 2*time.Minute, "the namespaces' pods gone", func() (bool, error) {
		for _, ns := range namespaces {
			l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil || len(l.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	last, since, start := containerdShims(), time.Now(), time.Now()
	for time.Since(since) < settle && time.Since(start) < time.Minute {
		if err := floorSleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
		if n := containerdShims(); n != last {
			last, since = n, time.Now()
		}
	}
	return nil
}

// shimSettle is how long quietCluster wants the node's shims unchanged
// before a burst of n pods: 3 s (longer than the kubelet's 2 s
// housekeeping, which tears down deleted pods' sandboxes), 1 s for the
// tiny bursts of CI.
func shimSettle(n int) time.Duration {
	if n < 10 {
		return time.Second
	}
	return 3 * time.Second
}

// containerdShims counts this machine's processes whose name starts with
// "containerd-shim": one for each pod sandbox alive.
func containerdShims() int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	n := 0
	for _, d := range dirs {
		if b, err := os.ReadFile(d); err == nil && bytes.HasPrefix(b, []byte("containerd-shim")) {
			n++
		}
	}
	return n
}

// specCheck compares the floor's pod with the runner's job pod (its
// create request's body from the audit log), metadata and the
// containers' command and args aside: "same", or the fields that differ.
func specCheck(floor *corev1.Pod, jobPod json.RawMessage) string {
	if len(jobPod) == 0 {
		return "not checked: no create request of a job pod found in the audit log"
	}
	var job corev1.Pod
	if err := json.Unmarshal(jobPod, &job); err != nil {
		return "not checked: " + err.Error()
	}
	// The audit log has the request as decoded, the API server's defaults
	// filled in: the floor's pod gets them too.
	floor = floor.DeepCopy()
	floor.Spec.DNSPolicy, floor.Spec.SchedulerName = job.Spec.DNSPolicy, job.Spec.SchedulerName
	for i := range floor.Spec.Containers {
		if i < len(job.Spec.Containers) {
			c, jc := &floor.Spec.Containers[i], job.Spec.Containers[i]
			if c.ImagePullPolicy == "" {
				c.ImagePullPolicy = jc.ImagePullPolicy
			}
			c.TerminationMessagePath = jc.TerminationMessagePath
		}
	}
	norm := func(p *corev1.Pod) any {
		p = p.DeepCopy()
		p.ObjectMeta, p.TypeMeta = metav1.ObjectMeta{}, metav1.TypeMeta{}
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Command, p.Spec.Containers[i].Args = nil, nil
		}
		b, _ := json.Marshal(p)
		var m any
		_ = json.Unmarshal(b, &m)
		return m
	}
	var diffs []string
	jsonDiff("", norm(floor), norm(&job), &diffs)
	if len(diffs) == 0 {
		return "same (metadata and command aside)"
	}
	return "differs: " + strings.Join(diffs, "; ")
}

// jsonDiff appends to out, for each path where the decoded JSON values a
// (the floor's) and b (the job pod's) differ, "path: a vs b".
func jsonDiff(path string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		for _, k := range sorted {
			jsonDiff(path+"."+k, am[k], bm[k], out)
		}
		return
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok && len(as) == len(bs) {
		for i := range as {
			jsonDiff(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i], out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		*out = append(*out, fmt.Sprintf("%s: floor %s, job pod %s", strings.TrimPrefix(path, "."), ja, jb))
	}
}

// printFloor prints r's floor beside the cold burst's figures; nothing
// without a floor.
func printFloor(w io.Writer, r *KubeBurstResult) {
	f := r.Floor
	if f == nil {
		return
	}
	k := r.Cold
	if k == nil {
		k = &BurstPhase{}
	}
	fmt.Fprintf(w, "  floor: a bare client-go program (this process, one clientset, 50 qps / burst 100) creating %d pods at once,\n"+
		"    the job pod's spec with a shell as PID 1; one watch; `cat /proc/uptime` once over exec; delete (grace 0);\n"+
		"    ran %s the cold burst (namespace %s); its pod spec against the runner's: %s\n", f.Pods, f.Order, f.Namespace, f.SpecCheck)
	fmt.Fprintf(w, "    %-46s %-28s %s\n", "figure (ms; p50 / p99)", "Knotless, cold", "floor")
	row := func(name string, a, b string) { fmt.Fprintf(w, "    %-46s %-28s %s\n", name, a, b) }
	pp := func(s Spread) string { return fmt.Sprintf("%.0f / %.0f", s.P50, s.P99) }
	row("pod created → Running", pp(k.PodRunning), pp(f.PodRunning))
	row("queued (floor: create) → first command", pp(k.FirstStep), pp(f.FirstCommand))
	row("  the fastest, the slowest", fmt.Sprintf("%.0f, %.0f", k.FirstStep.Min, k.FirstStep.Max), fmt.Sprintf("%.0f, %.0f", f.FirstCommand.Min, f.FirstCommand.Max))
	row("agent delivered+connected (floor: exec → exit)", pp(k.AgentConnected), pp(f.Exec))
	row("push (floor: start) → last first command, s", fmt.Sprintf("%.1f", k.LastStartS), fmt.Sprintf("%.1f", f.LastCommandS))
	row("runs succeeded (floor: pods run / printed)", fmt.Sprint(k.Succeeded), fmt.Sprintf("%d / %d", f.Running, f.Commands))
	row("pods first unschedulable", fmt.Sprint(k.Unschedulable), fmt.Sprint(f.Unschedulable))
	fmt.Fprintf(w, "    API requests per run (Knotless) %s\n", requestsLine(k.Requests))
	fmt.Fprintf(w, "    API requests per pod (floor)    %s\n", requestsLine(f.Requests))
}
