package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentsession"
	"knotless.dev/knotless/internal/version"
)

// Name is the kube executor's name as the --executor flag spells it.
const Name = "kube"

// Defaults of Config.
const (
	DefaultImagePullGrace = 60 * time.Second
	DefaultPendingTimeout = 10 * time.Minute
	DefaultCPUs           = "1"
	DefaultMemory         = 2 << 30  // bytes
	DefaultDisk           = 10 << 30 // bytes
)

// Config configures the kube executor.
type Config struct {
	// Rest is the client configuration (client-go): in-cluster, or from a
	// kubeconfig with the standard loading rules (LoadClientConfig).
	// Required.
	Rest *rest.Config
	// Namespace is where job pods are made. Required.
	Namespace string
	// Runner names the runner in the pods' LabelRunner label, so that
	// Sweep finds this runner's pods and no other's.
	Runner string
	// Image is the job image when the workflow names none.
	Image string
	// CPUs, Memory and Disk are the job pod's requests and limits (cpu as
	// a Kubernetes quantity, sizes in bytes) when the workflow's
	// resources: say nothing, and the most a workflow may ask for. Zero:
	// DefaultCPUs, DefaultMemory, DefaultDisk.
	CPUs   string
	Memory int64
	Disk   int64
	// RunAs is the container's user; zero value: DefaultRunAs.
	RunAs RunAs
	// RuntimeClass, NodeSelector, Tolerations and PullSecrets go to the
	// pod's spec as they are (runtimeClassName, nodeSelector,
	// tolerations, imagePullSecrets).
	RuntimeClass string
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	PullSecrets  []string
	// PullPolicy is the container's imagePullPolicy; empty: Kubernetes'
	// default for the image's tag.
	PullPolicy corev1.PullPolicy
	// ImagePullGrace is how long an image that cannot be pulled is
	// retried before the run ends errored/image-pull (default 60 s).
	ImagePullGrace time.Duration
	// PendingTimeout is how long a pod may stay unscheduled before the
	// run ends errored/unschedulable (default 10 min).
	PendingTimeout time.Duration
	// Owner, when set, becomes every job pod's owner reference (the
	// runner's own pod, by UID), so that deleting the runner's pod deletes
	// its job pods.
	Owner *metav1.OwnerReference
	// InCluster says the runner runs in a pod of the cluster (its
	// ServiceAccount's configuration), for Doctor's identity checks.
	InCluster bool
	// Agent is the static knotless-agent program delivered into each pod.
	// Required.
	Agent string
	// Heartbeat and DeadAfter tune the agent connection; zero means
	// agent.DefaultHeartbeat and agent.DefaultDeadAfter.
	Heartbeat time.Duration
	DeadAfter time.Duration
	// Logger receives the executor's events; nil means slog.Default().
	Logger *slog.Logger
	// Ephemeral says no runner process will ever take the pods over
	// (`knotless-run exec`): each pod's agent ends its steps and exits,
	// ending the pod, once no runner has been connected for
	// OrphanAfter (default 30 s), so that a killed exec leaves no running
	// pod behind.
	Ephemeral   bool
	OrphanAfter time.Duration
}

// Executor runs each run in a pod of its own, made from Config, with the
// step agent as the container's PID 1; every step, copy and heartbeat of
// the run goes over one exec stream to the agent at a time.
type Executor struct {
	cfg    Config
	rest   *rest.Config
	client kubernetes.Interface
	ns     string
	log    *slog.Logger
	cpu    resource.Quantity

	agentOnce sync.Once
	agentBin  []byte
	agentErr  error

	watchOnce sync.Once
	synced    cache.InformerSynced
	lister    listersv1.PodNamespaceLister
	stopWatch chan struct{}

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a pod of ours changes
	live    agentsession.Live
}

var _ executor.Executor = (*Executor)(nil)
var _ executor.EarlyPreparer = (*Executor)(nil)

// New returns a kube executor. It checks cfg but does not reach the API
// server yet. Errors name the field to fix.
func New(cfg Config) (*Executor, error) {
	if cfg.Rest == nil {
		return nil, errors.New("kube executor: no client configuration")
	}
	if cfg.Namespace == "" {
		return nil, errors.New("kube executor: no namespace")
	}
	if cfg.Agent == "" {
		return nil, errors.New("kube executor: no step agent program (--agent)")
	}
	if cfg.CPUs == "" {
		cfg.CPUs = DefaultCPUs
	}
	cpu, err := resource.ParseQuantity(cfg.CPUs)
	if err != nil || cpu.Sign() <= 0 {
		return nil, fmt.Errorf("kube executor: --cpus %q: want a positive Kubernetes quantity such as 2 or 500m", cfg.CPUs)
	}
	if cfg.Memory <= 0 {
		cfg.Memory = DefaultMemory
	}
	if cfg.Disk <= 0 {
		cfg.Disk = DefaultDisk
	}
	if cfg.RunAs == (RunAs{}) {
		cfg.RunAs = DefaultRunAs
	}
	if cfg.ImagePullGrace <= 0 {
		cfg.ImagePullGrace = DefaultImagePullGrace
	}
	if cfg.PendingTimeout <= 0 {
		cfg.PendingTimeout = DefaultPendingTimeout
	}
	if cfg.Runner == "" {
		cfg.Runner = "runner"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	quietKlog(log)
	rc := rest.CopyConfig(cfg.Rest)
	// One runner makes few requests, but a burst of them (a pod, its
	// watch, two execs) must not wait on client-go's default limiter.
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube executor: client: %w", err)
	}
	return &Executor{
		cfg: cfg, rest: rc, client: client, ns: cfg.Namespace, cpu: cpu,
		log:       log.With("executor", Name, "namespace", cfg.Namespace),
		changed:   make(chan struct{}),
		stopWatch: make(chan struct{}),
	}, nil
}

// Name returns "kube".
func (e *Executor) Name() string { return Name }

// PrepareEarly reports true: Prepare makes the pod and delivers the agent
// while the runner fetches the checkout; the checkout is copied in at the
// first Exec, CopyIn or CopyOut.
func (e *Executor) PrepareEarly() bool { return true }

// Client returns the executor's clientset (for doctor-style checks).
func (e *Executor) Client() kubernetes.Interface { return e.client }

// Close stops the executor's pod watch. Sessions are not touched.
func (e *Executor) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.stopWatch:
	default:
		close(e.stopWatch)
	}
}

func (e *Executor) selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy, LabelRunner: labelValue(e.cfg.Runner)})
}

// watch starts (once) an informer on this runner's job pods (a
// label-selected list and watch; no polling) and waits, up to a minute,
// until its cache has synced. The informer retries its list and watch on
// its own; a call that gave up waiting leaves the next call to wait again.
func (e *Executor) watch(ctx context.Context) error {
	e.watchOnce.Do(func() {
		sel := e.selector().String()
		f := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(e.ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
		inf := f.Core().V1().Pods()
		notify := func() {
			e.mu.Lock()
			close(e.changed)
			e.changed = make(chan struct{})
			e.mu.Unlock()
		}
		_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { notify() },
			UpdateFunc: func(any, any) { notify() },
			DeleteFunc: func(any) { notify() },
		})
		e.lister = inf.Lister().Pods(e.ns)
		e.synced = inf.Informer().HasSynced
		f.Start(e.stopWatch)
	})
	if e.synced() {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), e.synced) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("watch pods in namespace %s: the pod informer did not sync within a minute (is the API server reachable, and may the runner list and watch pods there?)", e.ns)
	}
	return nil
}

// pod returns the cached pod and a channel closed at its next change;
// the pod is nil when it is not (or no longer) in the cache.
func (e *Executor) pod(name string) (*corev1.Pod, <-chan struct{}) {
	e.mu.Lock()
	ch := e.changed
	e.mu.Unlock()
	p, err := e.lister.Get(name)
	if err != nil {
		return nil, ch
	}
	return p, ch
}

// loadAgent reads the agent program once.
func (e *Executor) loadAgent() ([]byte, error) {
	e.agentOnce.Do(func() {
		e.agentBin, e.agentErr = os.ReadFile(e.cfg.Agent)
		if e.agentErr != nil {
			e.agentErr = fmt.Errorf("the step agent: %w", e.agentErr)
		}
	})
	return e.agentBin, e.agentErr
}

// validID is what a Spec.ID must look like.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// handleData is the kube executor's Handle.Data.
type handleData struct {
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	UID       types.UID `json:"uid"`
	// Workspace is the checkout on the runner's host, copied in again by
	// a recovered session when the pod never got it whole.
	Workspace string `json:"workspace,omitempty"`
}

// resources resolves the pod's requests (= limits) from the workflow's
// resources: and the runner's caps. A workflow asking for more than a cap
// is refused, every such value named with its cap in one message.
func (e *Executor) resources(spec executor.Spec) (cpu, mem, disk resource.Quantity, err error) {
	cpu = e.cpu.DeepCopy()
	var over []string
	if spec.CPUs != "" {
		q, perr := resource.ParseQuantity(spec.CPUs)
		if perr != nil || q.Sign() <= 0 {
			return cpu, mem, disk, fmt.Errorf("resources.cpus %q: want a positive quantity such as 2 or 500m", spec.CPUs)
		}
		if q.Cmp(e.cpu) > 0 {
			over = append(over, fmt.Sprintf("cpus %s (--cpus %s)", q.String(), e.cpu.String()))
		} else {
			cpu = q
		}
	}
	m, d := e.cfg.Memory, e.cfg.Disk
	if spec.MemoryBytes > 0 {
		if spec.MemoryBytes > e.cfg.Memory {
			over = append(over, fmt.Sprintf("memory %s (--memory %s)", binary(spec.MemoryBytes), binary(e.cfg.Memory)))
		} else {
			m = spec.MemoryBytes
		}
	}
	if spec.DiskBytes > 0 {
		if spec.DiskBytes > e.cfg.Disk {
			over = append(over, fmt.Sprintf("disk %s (--disk %s)", binary(spec.DiskBytes), binary(e.cfg.Disk)))
		} else {
			d = spec.DiskBytes
		}
	}
	if len(over) > 0 {
		return cpu, mem, disk, &executor.Fault{Reason: api.ReasonExecutor,
			Message: "the workflow asks for more than this runner allows: " + strings.Join(over, ", ")}
	}
	return cpu, *resource.NewQuantity(m, resource.BinarySI), *resource.NewQuantity(d, resource.BinarySI), nil
}

func binary(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

// Prepare makes the run's job pod (podFor: hardened, one per run, never
// reused), waits until its container runs, delivers the step agent over
// the first exec and connects to it; the checkout at spec.Workspace is
// copied into Workspace at the session's first Exec, CopyIn or CopyOut
// (PrepareEarly). It writes to spec.Log the pod's name, node, image,
// resources and user.
//
// Errors: a workflow asking for more resources than the runner allows,
// an image that cannot be pulled within ImagePullGrace (a *executor.Fault
// with reason image-pull and the kubelet's message), a pod unscheduled
// past PendingTimeout (unschedulable, with the scheduler's message), a
// pod the API server or the kubelet refuses (Pod Security, quota,
// CreateContainerConfigError: reason executor with their message), an
// agent that cannot be delivered. On error the pod is deleted.
func (e *Executor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	if !validID.MatchString(spec.ID) {
		return nil, fmt.Errorf("prepare kube session %q: the run ID must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", spec.ID)
	}
	if !e.live.Reserve(spec.ID) {
		return nil, fmt.Errorf("prepare kube session %s: a session with this ID is still live (call Cleanup first)", spec.ID)
	}
	s, err := e.prepare(ctx, spec)
	e.live.Done(spec.ID, s)
	if err != nil {
		return nil, fmt.Errorf("prepare kube session %s: %w", spec.ID, err)
	}
	return e.wrap(s), nil
}

func (e *Executor) logf(spec executor.Spec, format string, args ...any) {
	if spec.Log != nil {
		fmt.Fprintf(spec.Log, "kube executor: "+format+"\n", args...)
	}
}

func (e *Executor) prepare(ctx context.Context, spec executor.Spec) (*agentsession.Session, error) {
	if spec.Workspace != "" {
		if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", spec.Workspace)
			}
			return nil, fmt.Errorf("workspace: %w", err)
		}
	}
	image := spec.Image
	if image == "" {
		image = e.cfg.Image
	}
	if image == "" {
		return nil, errors.New("the workflow names no image: and the runner has no default image (--image)")
	}
	cpu, mem, disk, err := e.resources(spec)
	if err != nil {
		return nil, err
	}
	bin, err := e.loadAgent()
	if err != nil {
		return nil, err
	}
	if err := e.watch(ctx); err != nil {
		return nil, err
	}
	var deadline time.Time
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = time.Hour
	} else {
		deadline = time.Now().Add(timeout)
	}
	extra := []string{}
	if e.cfg.Ephemeral {
		extra = append(extra, "--exit-without-client", cmp.Or(e.cfg.OrphanAfter, 30*time.Second).String())
	}
	if e.cfg.Heartbeat > 0 {
		extra = append(extra, "--heartbeat", e.cfg.Heartbeat.String())
	}
	if e.cfg.DeadAfter > 0 {
		extra = append(extra, "--dead-after", e.cfg.DeadAfter.String())
	}
	lbl := map[string]string{LabelManagedBy: ManagedBy, LabelRunner: labelValue(e.cfg.Runner), LabelRun: labelValue(spec.ID)}
	for k, v := range spec.Labels {
		if _, ok := lbl[k]; !ok && validLabelKey.MatchString(k) {
			lbl[k] = labelValue(v)
		}
	}
	pod := podFor(podSpec{
		Namespace: e.ns, GenerateName: podNamePrefix(spec.ID), Labels: lbl, Image: image,
		CPU: cpu, Memory: mem, Disk: disk, Deadline: timeout, RunAs: e.cfg.RunAs,
		RuntimeClass: e.cfg.RuntimeClass, NodeSelector: e.cfg.NodeSelector, Tolerations: e.cfg.Tolerations,
		PullSecrets: e.cfg.PullSecrets, PullPolicy: e.cfg.PullPolicy, Owner: e.cfg.Owner,
		Command: bootstrapCommand(spec.ID, deadline, extra),
	})
	created := time.Now()
	pod, err = e.client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		msg := err.Error()
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			return nil, &executor.Fault{Reason: api.ReasonExecutor, Message: "the API server refused the job pod: " + msg}
		}
		return nil, fmt.Errorf("create the job pod: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			e.deletePod(context.WithoutCancel(ctx), pod.Name, pod.UID, false)
		}
	}()
	user := "uid:gid " + e.cfg.RunAs.String()
	if e.cfg.RunAs.Image {
		user = "the image's own user (non-root)"
	}
	e.logf(spec, "pod %s/%s: image %s, cpu %s, memory %s, ephemeral storage %s (requests = limits), as %s, read-only root file system, no capabilities, no service account token",
		e.ns, pod.Name, image, cpu.String(), mem.String(), disk.String(), user)
	running, err := e.waitRunning(ctx, spec, pod.Name, created)
	if err != nil {
		return nil, err
	}
	e.logf(spec, "pod running on node %s after %s", running.Spec.NodeName, time.Since(created).Round(time.Millisecond))

	handle, _ := json.Marshal(handleData{Namespace: e.ns, Pod: pod.Name, UID: pod.UID, Workspace: spec.Workspace})
	t0 := time.Now()
	first, err := e.deliver(ctx, pod.Name, bin)
	if err != nil {
		return nil, err
	}
	client := e.newClient(spec.ID, pod.Name, first)
	hello, err := client.Connect(ctx)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("connect to the step agent: %w", err)
	}
	e.logf(spec, "step agent %s delivered (%.1f MB) and connected in %s; a step's processes end with the step (%s)",
		hello.Agent, float64(len(bin))/1e6, time.Since(t0).Round(time.Millisecond), hello.Kill)
	s := e.newSession(spec.ID, pod.Name, pod.UID, hello.Workdir, client, handle, spec.Workspace)
	ok = true
	return s, nil
}

var validLabelKey = regexp.MustCompile(`^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// waitRunning waits until the pod's container runs, reporting in spec.Log
// what it waits for (once per new message), and fails with a
// *executor.Fault when podFault says the pod cannot run.
func (e *Executor) waitRunning(ctx context.Context, spec executor.Spec, name string, created time.Time) (*corev1.Pod, error) {
	said := ""
	tick := time.NewTicker(time.Second) // the grace periods pass without events
	defer tick.Stop()
	for {
		p, changed := e.pod(name)
		if p != nil && running(p) {
			return p, nil
		}
		if p != nil || time.Since(created) > 5*time.Second {
			if f := podFault(p, time.Now(), created, e.cfg.ImagePullGrace, e.cfg.PendingTimeout); f != nil {
				return nil, &executor.Fault{Reason: f.Reason, Message: f.Message}
			}
		}
		if note := pendingNote(p); note != "" && note != said {
			said = note
			e.logf(spec, "waiting for the pod: %s", note)
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// deliver writes the agent's program into the pod over one exec, wakes
// PID 1 to exec it, and returns that same exec as the first connection to
// the agent (its STDIN/STDOUT become `knotless-agent connect`). The first
// exec on a fresh node may fail while the pod already runs (the kubelet's
// serving certificate): it is retried for up to a minute.
func (e *Executor) deliver(ctx context.Context, pod string, bin []byte) (io.ReadWriteCloser, error) {
	deadline := time.Now().Add(time.Minute)
	for attempt := 1; ; attempt++ {
		st, err := e.deliverOnce(ctx, pod, bin)
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("deliver the step agent into pod %s (%d attempts): %w", pod, attempt, err)
		}
		if p, _ := e.pod(pod); p == nil || !running(p) {
			if f := podFault(p, time.Now(), time.Now(), e.cfg.ImagePullGrace, 0); f != nil {
				return nil, &executor.Fault{Reason: f.Reason, Message: f.Message}
			}
		}
		e.log.Debug("delivering the step agent failed; retrying", "pod", pod, "attempt", attempt, "err", err)
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Lines of the delivery exec's own short protocol on STDOUT, before the
// agent protocol starts on the same stream.
const (
	lineSendAgent = "knotless-send-agent"
	lineDelivered = "knotless-agent-delivered"
)

func (e *Executor) deliverOnce(ctx context.Context, pod string, bin []byte) (io.ReadWriteCloser, error) {
	st, err := e.openStream(pod, []string{"/bin/sh", "-c", deliverScript(int64(len(bin)))})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (io.ReadWriteCloser, error) {
		_ = st.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = st.Close() })
	defer stop()
	t0 := time.Now()
	line, err := readLine(st)
	if err != nil {
		return fail(fmt.Errorf("the delivery exec: %w", err))
	}
	tExec := time.Since(t0)
	if line == lineSendAgent {
		if _, err := st.Write(bin); err != nil {
			return fail(fmt.Errorf("send the agent: %w", err))
		}
		tSent := time.Since(t0)
		if line, err = readLine(st); err != nil {
			return fail(fmt.Errorf("the delivery exec after the agent was sent: %w", err))
		}
		e.log.Debug("step agent delivered", "pod", pod, "exec_ms", tExec.Milliseconds(), "sent_ms", tSent.Milliseconds(), "started_ms", time.Since(t0).Milliseconds())
	}
	if line != lineDelivered {
		return fail(fmt.Errorf("the delivery exec said %q", line))
	}
	return st, nil
}

// readLine reads one line byte by byte, so that nothing after it is taken
// from the stream; at most 256 bytes.
func readLine(r io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for len(b) < 256 {
		if _, err := io.ReadFull(r, one); err != nil {
			if len(b) > 0 {
				return "", fmt.Errorf("%w after %q", err, b)
			}
			return "", err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
	return "", fmt.Errorf("no line end in %q", b)
}

// newClient returns the agent client of a run's pod: first (when not nil)
// is its first connection; each later one is a new exec of
// `knotless-agent connect`. A pod that is gone, or whose container ended,
// makes a dial fail with agent.ErrGone.
func (e *Executor) newClient(id, pod string, first io.ReadWriteCloser) *agent.Client {
	var mu sync.Mutex
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		mu.Lock()
		c := first
		first = nil
		mu.Unlock()
		if c != nil {
			return c, nil
		}
		if p, _ := e.pod(pod); p == nil || !running(p) {
			// The cache may lag: ask the API server before giving up.
			got, err := e.client.CoreV1().Pods(e.ns).Get(ctx, pod, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("%w: the job pod %s is gone", agent.ErrGone, pod)
			}
			if err == nil && !running(got) {
				if f := podFault(got, time.Now(), time.Now(), 0, 0); f != nil {
					return nil, fmt.Errorf("%w: %s", agent.ErrGone, f.Message)
				}
			}
		}
		st, err := e.openStream(pod, []string{AgentPath, "connect", "--socket", AgentSocket, "--wait", "10s"})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	return agent.NewClient(dial, agent.Options{
		Name:      "knotless-run " + version.Version,
		Heartbeat: e.cfg.Heartbeat,
		DeadAfter: e.cfg.DeadAfter,
		Logger:    e.log.With("run", id, "pod", pod),
		OnHello: func(h agent.AgentHello) error {
			if h.Run != id {
				return fmt.Errorf("the agent in pod %s serves run %q, not %q", pod, h.Run, id)
			}
			return nil
		},
	})
}

// workspaceMark is the file that says the checkout was copied in whole.
const workspaceMark = AgentDir + "/workspace-copied"

func (e *Executor) newSession(id, pod string, uid types.UID, workdir string, client *agent.Client, handle json.RawMessage, workspace string) *agentsession.Session {
	var s *agentsession.Session
	cfg := agentsession.Config{
		Executor: Name, ID: id, Workdir: workdir, Client: client,
		Handle: executor.Handle{Executor: Name, ID: id, Data: handle},
		Fault: func(err error) (executor.Result, bool) {
			return e.stepFault(pod, err)
		},
		Remove: func(ctx context.Context) error { return e.remove(ctx, s, pod, uid) },
		Forget: func() { e.live.Forget(id, s) },
	}
	if workspace != "" {
		cfg.Ready = func(ctx context.Context) error {
			if err := s.CopyInNow(ctx, workspace, "."); err != nil {
				return fmt.Errorf("copy the checkout into the pod: %w", err)
			}
			empty := e.emptyFile()
			if empty == "" {
				return nil
			}
			return s.CopyInNow(ctx, empty, workspaceMark)
		}
	}
	s = agentsession.New(cfg)
	return s
}

// emptyFile is an empty file on the host to copy in as a mark.
func (e *Executor) emptyFile() string {
	f, err := os.CreateTemp("", "knotless-mark-*")
	if err != nil {
		return ""
	}
	name := f.Name()
	f.Close()
	return name
}

// stepFault reads what became of the pod when the agent could not be
// reached during a step: the pod's own reason (oom-killed, evicted,
// timeout, pod-lost) makes the step's Result.
func (e *Executor) stepFault(pod string, err error) (executor.Result, bool) {
	p, _ := e.pod(pod)
	if p == nil || running(p) {
		got, gerr := e.client.CoreV1().Pods(e.ns).Get(context.Background(), pod, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			p = nil
		case gerr == nil:
			p = got
		default:
			return executor.Result{}, false
		}
	}
	if p != nil && running(p) && p.DeletionTimestamp == nil {
		return executor.Result{}, false
	}
	f := podFault(p, time.Now(), time.Now(), 0, 0)
	if f == nil {
		f = &fault{ReasonPodLost, "the step agent cannot be reached: " + err.Error()}
	}
	code := -1
	if f.Reason == api.ReasonOOMKilled {
		code = 137
	}
	return executor.Result{ExitCode: code, Reason: f.Reason, Note: f.Message}, true
}

// shutdownBound bounds asking the agent to end its steps and exit.
const shutdownBound = 10 * time.Second

// remove ends a session's pod: it asks the agent over the session's
// stream to kill every step process and exit (it answers once none is
// left), and then deletes the pod at once (grace period 0: nothing runs
// in it any more, and a graceful deletion would wait for the kubelet's
// next relist, a second or two). When the agent cannot be asked, the
// deletion is graceful (SIGTERM to the agent as PID 1, which ends the
// steps and exits) and waited for.
func (e *Executor) remove(ctx context.Context, s *agentsession.Session, pod string, uid types.UID) error {
	sctx, cancel := context.WithTimeout(ctx, shutdownBound)
	err := s.Client().Shutdown(sctx)
	cancel()
	if err != nil {
		e.log.Debug("the agent could not be asked to shut down; deleting its pod gracefully", "pod", pod, "err", err)
		return e.deletePod(ctx, pod, uid, false)
	}
	return e.deletePod(ctx, pod, uid, true)
}

// deletePod deletes the pod when it still has uid (background
// propagation: dependents are not waited for) and waits up to 30 s until
// it is gone. ended says nothing runs in it any more: the deletion is
// immediate (grace period 0). Else the grace period is 1 s: the agent as
// PID 1 exits on SIGTERM at once.
func (e *Executor) deletePod(ctx context.Context, name string, uid types.UID, ended bool) error {
	grace := int64(1)
	if ended {
		grace = 0
	}
	opts := metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(grace),
		PropagationPolicy:  ptr.To(metav1.DeletePropagationBackground),
	}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := e.client.CoreV1().Pods(e.ns).Delete(ctx, name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	if e.lister == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		p, changed := e.pod(name)
		if p == nil || p.UID != uid {
			return nil
		}
		select {
		case <-changed:
		case <-time.After(time.Second):
		case <-wctx.Done():
			return fmt.Errorf("pod %s still exists 30 s after its deletion", name)
		}
	}
}

// Recover re-attaches to the pod h describes: it must still exist with
// the recorded UID and run; then a new exec reaches its agent. When
// Config.Owner is set and the pod's owner reference names another UID (a
// new runner pod adopting the pods of the old one), the reference is
// re-pointed, so that the garbage collector does not delete the pod with
// the old owner. Errors wrap executor.ErrNotRecoverable when the handle is
// not this executor's or the pod is gone or ended; for a pod gone or
// ended they also wrap an *executor.Fault with the pod's reason (pod-lost,
// evicted, oom-killed, timeout).
func (e *Executor) Recover(ctx context.Context, h executor.Handle) (executor.Session, error) {
	notRecoverable := func(format string, args ...any) error {
		return fmt.Errorf("recover kube session %s: %s: %w", h.ID, fmt.Sprintf(format, args...), executor.ErrNotRecoverable)
	}
	if h.Executor != Name {
		return nil, notRecoverable("the handle is of executor %q", h.Executor)
	}
	var data handleData
	if err := json.Unmarshal(h.Data, &data); err != nil || data.Pod == "" {
		return nil, notRecoverable("unreadable handle")
	}
	if data.Namespace != e.ns {
		return nil, notRecoverable("the pod is in namespace %s, this runner works in %s", data.Namespace, e.ns)
	}
	if err := e.watch(ctx); err != nil {
		return nil, fmt.Errorf("recover kube session %s: %w", h.ID, err)
	}
	p, err := e.client.CoreV1().Pods(e.ns).Get(ctx, data.Pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		f := &executor.Fault{Reason: ReasonPodLost, Message: fmt.Sprintf("the job pod %s is gone", data.Pod)}
		return nil, fmt.Errorf("recover kube session %s: %w: %w", h.ID, f, executor.ErrNotRecoverable)
	}
	if err != nil {
		return nil, fmt.Errorf("recover kube session %s: %w", h.ID, err)
	}
	if p.UID != data.UID {
		return nil, notRecoverable("the pod %s is another pod now (uid %s, was %s)", data.Pod, p.UID, data.UID)
	}
	if !running(p) || p.DeletionTimestamp != nil {
		msg := "it does not run"
		reason := ReasonPodLost
		if f := podFault(p, time.Now(), time.Now(), 0, 0); f != nil {
			msg, reason = f.Message, f.Reason
		}
		f := &executor.Fault{Reason: reason, Message: fmt.Sprintf("the job pod %s: %s", data.Pod, msg)}
		return nil, fmt.Errorf("recover kube session %s: %w: %w", h.ID, f, executor.ErrNotRecoverable)
	}
	e.adopt(ctx, p)
	if !e.live.Reserve(h.ID) {
		return nil, fmt.Errorf("recover kube session %s: a session with this ID is live in this process", h.ID)
	}
	client := e.newClient(h.ID, p.Name, nil)
	fail := func(err error) (executor.Session, error) {
		_ = client.Close()
		e.live.Done(h.ID, nil)
		return nil, err
	}
	hello, err := client.Connect(ctx)
	if err != nil {
		if errors.Is(err, agent.ErrGone) || errors.Is(err, agent.ErrNotAgent) {
			return fail(notRecoverable("%v", err))
		}
		return fail(fmt.Errorf("recover kube session %s: %w", h.ID, err))
	}
	// The checkout is copied again unless the mark says it arrived whole.
	workspace := ""
	if !e.hasMark(ctx, client) {
		if fi, err := os.Stat(data.Workspace); data.Workspace == "" || err != nil || !fi.IsDir() {
			return fail(notRecoverable("the pod %s never got the whole checkout, and it is not on this host", p.Name))
		}
		workspace = data.Workspace
	}
	s := e.newSession(h.ID, p.Name, p.UID, hello.Workdir, client, h.Data, workspace)
	e.live.Done(h.ID, s)
	return e.wrap(s), nil
}

// hasMark reports whether workspaceMark exists in the pod.
func (e *Executor) hasMark(ctx context.Context, client *agent.Client) bool {
	err := client.CopyOut(ctx, workspaceMark, func(r io.Reader) error {
		_, err := io.Copy(io.Discard, r)
		return err
	})
	return err == nil
}

// adopt re-points the pod's owner reference to Config.Owner when it names
// another UID (JSON merge patch of metadata.ownerReferences).
func (e *Executor) adopt(ctx context.Context, p *corev1.Pod) {
	o := e.cfg.Owner
	if o == nil || slices.ContainsFunc(p.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == o.UID }) {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{*o}}})
	if _, err := e.client.CoreV1().Pods(e.ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.log.Warn("could not re-point the job pod's owner reference to this runner's pod", "pod", p.Name, "err", err)
		return
	}
	e.log.Info("job pod adopted: owner reference re-pointed to this runner's pod", "pod", p.Name, "owner", o.Name, "uid", o.UID)
}

// Sweep deletes every job pod of this runner (by its labels) whose run is
// not in keep and that no live session holds. Errors of single pods are
// joined.
func (e *Executor) Sweep(ctx context.Context, keep []string) error {
	list, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: e.selector().String()})
	if err != nil {
		return fmt.Errorf("sweep job pods: %w", err)
	}
	keepLabels := make([]string, len(keep))
	for i, k := range keep {
		keepLabels[i] = labelValue(k)
	}
	var errs []error
	for _, p := range list.Items {
		run := p.Labels[LabelRun]
		if e.live.Holds(run) || slices.Contains(keepLabels, run) {
			continue
		}
		if err := e.deletePod(ctx, p.Name, p.UID, false); err != nil {
			errs = append(errs, err)
			continue
		}
		e.log.Info("deleted a job pod no run of this runner holds", "pod", p.Name, "run", run)
	}
	return errors.Join(errs...)
}

// String describes the executor for logs.
func (e *Executor) String() string {
	return fmt.Sprintf("kube executor (namespace %s, runner %s)", e.ns, strings.TrimSpace(e.cfg.Runner))
}
