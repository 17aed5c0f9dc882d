package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// Name is the kube executor's name as the --executor flag spells it.
const Name = "kube"

// Defaults of Config.
const (
	DefaultImagePullGrace = 60 * time.Second
	DefaultPendingTimeout = 10 * time.Minute
	DefaultDisk           = 10 << 30 // bytes
)

// Config configures the kube executor. Of the shared agentenv.Config it
// uses everything: the Job's CPUs and Memory, with Disk, are the job
// pod's requests and limits when the workflow's resources: say nothing,
// and the most a workflow may ask for; Agent is the static
// knotless-agent delivered into each pod (required); an Ephemeral pod's
// agent ends its steps and exits, ending the pod, once no runner has been
// connected for OrphanAfter.
type Config struct {
	agentenv.Config
	// Rest is the client configuration (client-go): in-cluster, or from a
	// kubeconfig with the standard loading rules (LoadClientConfig).
	// Required. Its QPS and Burst bound the executor's requests, all runs
	// together (0: DefaultQPS and DefaultBurst; a negative QPS: no
	// limit); New gives a copy of it a rate limiter whose waits are
	// measured and a transport that counts each request (instrument).
	Rest *rest.Config
	// Namespace is where job pods are made. Required.
	Namespace string
	// Disk is the job pod's ephemeral-storage request and limit, and each
	// emptyDir's sizeLimit, in bytes (0: DefaultDisk).
	Disk int64
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
	// Owner, when set, becomes every job pod's owner reference, so that
	// the garbage collector deletes the job pods with it: which object
	// that is (in the shipped manifests the runner's Deployment) is
	// stated in owner.go.
	Owner *metav1.OwnerReference
	// InCluster says the runner runs in a pod of the cluster (its
	// ServiceAccount's configuration), for Doctor's identity checks.
	InCluster bool
	// WarmPods is how many warm pods the runner keeps ready for runs that
	// ask for its defaults (image and resources): a claim takes one,
	// skipping the pod's start and the agent's delivery; 0 (the default)
	// keeps none. Never more than Capacity allows beside the runs in
	// progress; ignored when Ephemeral. Each holds its requests of the
	// namespace's quota while it waits.
	WarmPods int
	// WarmMaxAge is how long a warm pod waits for a claim before it is
	// replaced (0: DefaultWarmMaxAge).
	WarmMaxAge time.Duration
	// Capacity is how many runs the runner executes at once (0: no
	// bound), for the warm pool.
	Capacity int
	// UserNamespace is UserNamespaceAuto (""), UserNamespaceRequired or
	// UserNamespaceOff: whether job pods ask for a user namespace of
	// their own (spec.hostUsers false) and what a pod that does not get
	// one means.
	UserNamespace string
	// BuildsNamespace, when set, allows container builds (a workflow's
	// container-builds: true): their job pods go to this namespace (Pod
	// Security baseline) with a builder sidecar of BuilderImage whose
	// seccomp profile is the Localhost BuilderSeccompProfile (relative to
	// the kubelet's seccomp directory; "": DefaultBuilderSeccompProfile).
	// Empty: such workflows are refused before any pod exists.
	BuildsNamespace       string
	BuilderImage          string
	BuilderSeccompProfile string
	// builder marks the Executor of the builds namespace (newBuilds).
	builder bool
	// Pids is every step's process limit in a pod with a user namespace
	// of its own (agent.Serve.Nproc: RLIMIT_NPROC, processes and threads
	// of the job's user, the agent's among them); 0: executor.DefaultPids; -1:
	// none. A pod without one gets none: there the kernel would count
	// every process of the uid on the node.
	Pids int
}

// Executor runs each run in a pod of its own, made from Config, with the
// step agent as the container's PID 1; every step, copy and heartbeat of
// the run goes over one exec stream to the agent at a time.
type Executor struct {
	*agentenv.Base
	cfg    Config
	rest   *rest.Config
	client kubernetes.Interface
	ns     string
	log    *slog.Logger
	caps   executor.Caps

	agentOnce sync.Once
	agents    agentenv.Agents // by architecture
	agentErr  error
	agentMu   sync.Mutex
	agentBins map[string][]byte // read once per architecture
	// nodeMachine: node name → what `uname -m` printed in its last job
	// pod (its architecture for an image without uname, and the agent a
	// delivery sends before the pod asks).
	nodeMachine sync.Map

	watchOnce sync.Once
	synced    cache.InformerSynced
	lister    listersv1.PodNamespaceLister
	stopWatch chan struct{}

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a pod of ours changes

	pool     *warmPool // nil without Config.WarmPods
	poolOnce sync.Once

	// usernsRefused: RuntimeClass ("" for none) → why its pods get no
	// user namespace (under auto, after a node's runtime refused one);
	// usernsNodes: node name → what its last job pod's uid_map said.
	usernsRefused sync.Map
	usernsNodes   sync.Map

	// builds is the Executor of Config.BuildsNamespace (newBuilds), nil
	// when builds are not allowed.
	builds *Executor
}

var (
	_ executor.EnvironmentCounter = (*Executor)(nil)
	_ executor.Executor           = (*Executor)(nil)
	_ executor.Finder             = (*Executor)(nil)
	_ executor.Doctor             = (*Executor)(nil)
)

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
	cfg.Config = cfg.Config.Defaults()
	if cfg.Disk <= 0 {
		cfg.Disk = DefaultDisk
	}
	caps, err := executor.CapsOf(cfg.Job, cfg.Disk)
	if err != nil {
		return nil, fmt.Errorf("kube executor: %w", err)
	}
	if cfg.ImagePullGrace <= 0 {
		cfg.ImagePullGrace = DefaultImagePullGrace
	}
	if cfg.PendingTimeout <= 0 {
		cfg.PendingTimeout = DefaultPendingTimeout
	}
	if cfg.UserNamespace, err = ParseUserNamespace(cfg.UserNamespace); err != nil {
		return nil, fmt.Errorf("kube executor: %w", err)
	}
	switch {
	case cfg.Pids == 0:
		cfg.Pids = executor.DefaultPids
	case cfg.Pids < 0:
		cfg.Pids = 0
	}
	quietKlog(cfg.Logger)
	rc := rest.CopyConfig(cfg.Rest)
	// One runner makes few requests, but a burst of them (a pod, its
	// watch, two execs) must not wait on client-go's default limiter
	// (5/10): DefaultQPS and DefaultBurst say why these.
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = DefaultQPS, DefaultBurst
	}
	instrument(rc)
	// The builds namespace's executor (newBuilds) shares the limiter.
	cfg.Rest = rc
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube executor: client: %w", err)
	}
	e := &Executor{
		cfg: cfg, rest: rc, client: client, ns: cfg.Namespace, caps: caps,
		log:       cfg.Logger.With("executor", Name, "namespace", cfg.Namespace),
		changed:   make(chan struct{}),
		stopWatch: make(chan struct{}),
	}
	e.Base = agentenv.NewBase(Name, accountedDriver{(*driver)(e)}, cfg.Config, labelValue)
	if e.builds, err = newBuilds(cfg); err != nil {
		return nil, fmt.Errorf("kube executor: %w", err)
	}
	if cfg.WarmPods > 0 && !cfg.Ephemeral {
		if e.cfg.WarmMaxAge <= 0 {
			e.cfg.WarmMaxAge = DefaultWarmMaxAge
		}
		e.pool = newWarmPool(e)
	}
	return e, nil
}

// Client returns the executor's clientset (for doctor-style checks).
func (e *Executor) Client() kubernetes.Interface { return e.client }

// Close stops the warm pool (deleting its pods, which hold no run) and
// the executor's pod watch (io.Closer; always nil). Sessions are not
// touched.
func (e *Executor) Close() error {
	if e.builds != nil {
		_ = e.builds.Close()
	}
	if e.pool != nil {
		e.pool.close()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.stopWatch:
	default:
		close(e.stopWatch)
	}
	return nil
}

func (e *Executor) selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{agentenv.LabelManagedBy: agentenv.ManagedBy, agentenv.LabelRunner: labelValue(e.cfg.Runner)})
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

// loadAgent returns the step agent program for arch (GOARCH), read once:
// Config.Agent and the knotless-agent-linux-ARCH files beside it
// (agentenv.FindAgents). Errors name the architecture and the file to
// install.
func (e *Executor) loadAgent(arch string) ([]byte, error) {
	e.agentOnce.Do(func() { e.agents, e.agentErr = agentenv.FindAgents(e.cfg.Agent) })
	if e.agentErr != nil {
		return nil, fmt.Errorf("the step agent: %w", e.agentErr)
	}
	path, err := e.agents.For(arch)
	if err != nil {
		return nil, err
	}
	e.agentMu.Lock()
	defer e.agentMu.Unlock()
	if b, ok := e.agentBins[arch]; ok {
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the step agent for linux/%s: %w", arch, err)
	}
	if e.agentBins == nil {
		e.agentBins = map[string][]byte{}
	}
	e.agentBins[arch] = b
	return b, nil
}

// handleData is the kube executor's Handle.Data.
type handleData struct {
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	UID       types.UID `json:"uid"`
	// Workspace is the checkout on the runner's host, copied in again by
	// a recovered session when the pod never got it whole.
	Workspace string `json:"workspace,omitempty"`
}

func (e *Executor) logf(spec executor.Spec, format string, args ...any) {
	if spec.Log != nil {
		fmt.Fprintf(spec.Log, "kube executor: "+format+"\n", args...)
	}
}

// waitRunning waits until the pod's container runs, reporting in spec.Log
// what it waits for (once per new message), and fails with a
// *executor.Fault when podFault says the pod cannot run, or the kubelet's
// events say the runtime cannot make its sandbox (sandboxFault: a
// RuntimeClass whose handler the node lacks at once, other failures after
// sandboxGrace).
func (e *Executor) waitRunning(ctx context.Context, spec executor.Spec, name string, created time.Time) (*corev1.Pod, error) {
	said := ""
	tick := time.NewTicker(time.Second) // the grace periods pass without events
	defer tick.Stop()
	var lastEvents time.Time
	eventsEvery := time.Duration(0) // the first read: a second after the pod was created
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
		// A scheduled pod whose sandbox the runtime cannot make stays
		// ContainerCreating for ever; only the kubelet's events say why.
		if p != nil && scheduled(p) && time.Since(lastEvents) >= eventsEvery && time.Since(created) >= time.Second {
			lastEvents = time.Now()
			eventsEvery = max(sandboxPoll, nextSandboxPoll(eventsEvery))
			if f := e.sandboxFault(ctx, p, created); f != nil {
				return nil, f
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

// String describes the executor for logs.
func (e *Executor) String() string {
	return fmt.Sprintf("kube executor (namespace %s, runner %s)", e.ns, strings.TrimSpace(e.cfg.Runner))
}

var _ executor.Facter = (*Executor)(nil)

// Facts implements executor.Facter: the namespace job pods go to, what
// owns them (owner.go), in a cluster the runner's own pod's name, the
// user namespaces the job pods get (userNamespaceFact) with their
// process limit, and whether it allows container builds.
func (e *Executor) Facts() map[string]string {
	f := map[string]string{"namespace": e.ns}
	if o := ownerName(e.cfg.Owner); o != "" {
		f["job pods owned by"] = strings.ToLower(o)
	}
	if e.cfg.InCluster {
		if pod, err := ownPodName(); err == nil && pod != "" {
			f["pod"] = pod
		}
	}
	f["user namespace"] = e.userNamespaceFact()
	f["container builds"] = e.buildsFact()
	f["process limit"] = "none"
	if e.cfg.Pids > 0 && e.cfg.UserNamespace != UserNamespaceOff {
		f["process limit"] = fmt.Sprintf("%d per job pod with a user namespace (--pids)", e.cfg.Pids)
	}
	return f
}

// EnvironmentsByPhase implements executor.EnvironmentCounter: this
// runner's job pods in the informer's cache by status.phase (Pending,
// Running, Succeeded, Failed, Unknown), a warm pod unclaimed as "Warm";
// nil before the first run or warm pod started the watch.
func (e *Executor) EnvironmentsByPhase() map[string]int {
	counts := e.ownPhases()
	if e.builds == nil {
		return counts
	}
	b := e.builds.EnvironmentsByPhase()
	if b == nil {
		return counts
	}
	if counts == nil {
		counts = map[string]int{}
	}
	for k, v := range b {
		counts[k] += v
	}
	return counts
}

// ownPhases is EnvironmentsByPhase in this Executor's own namespace.
func (e *Executor) ownPhases() map[string]int {
	if e.lister == nil || e.synced == nil || !e.synced() {
		return nil
	}
	pods, err := e.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, p := range pods {
		phase := string(p.Status.Phase)
		if phase == "" {
			phase = string(corev1.PodPending)
		}
		if p.Labels[LabelWarm] == "true" {
			phase = "Warm"
		}
		out[phase]++
	}
	return out
}
