package kube

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/units"
)

// Options are the kube executor's part of knotless-run's command line
// (executor.Options); it also reads the shared job flags (--image,
// --cpus, --memory, --run-as, --pids).
type Options struct {
	kubeconfig     string
	namespace      string
	disk           string
	runtimeClass   string
	nodeSelector   []string
	tolerations    []string
	pullSecrets    []string
	imagePullGrace time.Duration
	pendingTimeout time.Duration
	owner          string
	warmPods       int
	warmMaxAge     time.Duration
	userNamespace  string
	buildsNS       string
	builderSeccomp string
	qps            qpsValue
	burst          burstValue
}

var _ executor.Options = (*Options)(nil)

// Name returns "kube".
func (*Options) Name() string { return Name }

// UsesJob reports true: the kube executor runs images.
func (*Options) UsesJob() bool { return true }

// AddFlags adds the kube executor's own flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: the standard loading rules: KUBECONFIG, ~/.kube/config, else the pod's ServiceAccount when in a cluster); never stored")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the job pods (default: the runner pod's own, else the kubeconfig context's)")
	fs.StringVar(&o.disk, "disk", "10Gi", "job pod ephemeral storage (requests = limits; also each emptyDir's sizeLimit), and the most a workflow may ask for")
	fs.StringVar(&o.runtimeClass, "runtime-class", "", "RuntimeClass of job pods, e.g. gvisor or kata")
	fs.StringArrayVar(&o.nodeSelector, "node-selector", nil, "node label KEY=VALUE job pods must run on (repeatable)")
	fs.StringArrayVar(&o.tolerations, "toleration", nil, "taint job pods tolerate: KEY[=VALUE][:EFFECT] (repeatable)")
	fs.StringArrayVar(&o.pullSecrets, "pull-secret", nil, "image pull Secret in the job pods' namespace (repeatable)")
	fs.DurationVar(&o.imagePullGrace, "image-pull-grace", DefaultImagePullGrace, "how long an image that cannot be pulled is retried before the run ends errored/image-pull")
	fs.StringVar(&o.owner, "owner", "", "the object that owns the job pods, KIND/NAME: deployment/NAME (the runner's Deployment: job pods survive the runner pod's replacement and go with the Deployment), statefulset/NAME, configmap/NAME or pod/NAME; the runner needs get on it (default: in a cluster, the runner's own pod, which the garbage collector deletes the job pods with)")
	fs.DurationVar(&o.pendingTimeout, "pending-timeout", DefaultPendingTimeout, "how long a job pod may stay unscheduled, or the namespace's quota refuse it, before the run ends errored/unschedulable")
	fs.IntVar(&o.warmPods, "warm-pods", 0, "job pods kept started, their step agent connected, for runs that ask for --image and the default resources: a claim takes one and skips the pod's start; each holds its requests of the namespace's quota while it waits; never more than --capacity allows beside the runs in progress (0: none)")
	fs.DurationVar(&o.warmMaxAge, "warm-max-age", DefaultWarmMaxAge, "how long a warm pod waits for a run before it is replaced")
	fs.StringVar(&o.buildsNS, "builds-namespace", "", "allow container builds (a workflow's container-builds: true): their job pods go to this namespace, labelled Pod Security baseline, with a BuildKit builder in a user namespace (docs/container-builds.md); empty: such workflows are refused before any pod exists")
	fs.StringVar(&o.builderSeccomp, "builder-seccomp-profile", DefaultBuilderSeccompProfile, "the builder's Localhost seccomp profile, relative to the kubelet's seccomp directory, as deploy/kubernetes/builds installs it")
	o.qps, o.burst = DefaultQPS, DefaultBurst
	fs.Var(&o.qps, "kube-api-qps", "Kubernetes API requests a second the runner sends at most, on average, all its runs together (client-go's token bucket; over 0, e.g. 20 or 0.5): a request beyond it waits in the runner, and a run whose setup's requests waited over 1 s in total says so in its setup log (docs/kubernetes.md)")
	fs.Var(&o.burst, "kube-api-burst", "Kubernetes API requests the runner may send at once before --kube-api-qps holds them (the token bucket's size; at least 1)")
	fs.StringVar(&o.userNamespace, "user-namespace", UserNamespaceAuto, "job pods in a user namespace of their own (hostUsers: false: the pod's root is not the node's), proven from inside each pod: auto (ask; where a node cannot give one, say so in the run's log and go on without), required (a run whose pod gets none ends errored before any step) or off")
}

// New makes the kube executor from the flags: client configuration by
// LoadClientConfig, the job pods' owner (--owner, else in a cluster the
// runner's own pod: owner.go), the step agent setup.Agent (or the one
// beside knotless-run).
// It logs once what Kubernetes cannot do of a runner's limits.
func (o *Options) New(setup executor.Setup) (executor.Executor, error) {
	rc, ns, inCluster, err := LoadClientConfig(o.kubeconfig, o.namespace)
	if err != nil {
		return nil, err
	}
	if o.qps == 0 && o.burst == 0 { // an Options not made by AddFlags
		o.qps, o.burst = DefaultQPS, DefaultBurst
	}
	if err := o.qps.check(); err != nil {
		return nil, fmt.Errorf("--kube-api-qps %v: %w", float32(o.qps), err)
	}
	if err := o.burst.check(); err != nil {
		return nil, fmt.Errorf("--kube-api-burst %d: %w", int(o.burst), err)
	}
	rc.QPS, rc.Burst = float32(o.qps), int(o.burst)
	cfg := Config{
		Config: agentenv.ConfigOf(setup), Rest: rc, Namespace: ns,
		RuntimeClass: o.runtimeClass, PullSecrets: o.pullSecrets,
		ImagePullGrace: o.imagePullGrace, PendingTimeout: o.pendingTimeout, InCluster: inCluster,
		WarmPods: o.warmPods, WarmMaxAge: o.warmMaxAge, Capacity: setup.Capacity,
		UserNamespace: o.userNamespace, Pids: int(setup.Job.Pids),
		BuildsNamespace: o.buildsNS, BuilderImage: setup.Job.BuilderImage, BuilderSeccompProfile: o.builderSeccomp,
	}
	if o.warmPods < 0 {
		return nil, fmt.Errorf("--warm-pods %d: give 0 for none, or how many", o.warmPods)
	}
	if cfg.Disk, err = units.ParseSize(o.disk); err != nil {
		return nil, fmt.Errorf("--disk %q: %v", o.disk, err)
	}
	if cfg.NodeSelector, err = ParseNodeSelector(o.nodeSelector); err != nil {
		return nil, err
	}
	if cfg.Tolerations, err = ParseTolerations(o.tolerations); err != nil {
		return nil, err
	}
	// Every agent is checked now (a static Linux program, named for its
	// architecture), not when a run needs it.
	agents, err := agentenv.FindAgents(setup.Agent)
	if err != nil {
		return nil, err
	}
	cfg.Agent = agents[agents.Arches()[0]]
	if setup.Agent != "" {
		cfg.Agent = setup.Agent
	}
	log := setup.Logger
	kind, name, err := ParseOwner(o.owner)
	if err != nil {
		return nil, err
	}
	switch {
	case kind != "":
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kube executor: client: %w", err)
		}
		if cfg.Owner, err = ResolveOwner(context.Background(), client, ns, kind, name); err != nil {
			return nil, fmt.Errorf("kube executor: --owner: %w", err)
		}
	case inCluster:
		owner, err := OwnPod(context.Background(), rc, ns)
		if err != nil {
			if log != nil {
				log.Warn("kube executor: job pods get no owner reference (deleting the runner's pod will not delete them; the runner's start sweeps them)", "err", err)
			}
		} else {
			cfg.Owner = owner
			if log != nil {
				log.Warn("kube executor: the job pods are owned by this runner's pod, so replacing it (rollout restart, upgrade, eviction) deletes the runs' pods; give --owner deployment/NAME to keep them for the next runner pod (docs/kubernetes.md)")
			}
		}
	}
	ex, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ex.log.Info("kube executor ready: no disk floor (each pod's ephemeral-storage limit bounds it); --pids holds only in pods with a user namespace",
		"server", rc.Host, "namespace", ns, "in_cluster", inCluster, "owner", ownerName(cfg.Owner), "agents", strings.Join(agents.Arches(), ","),
		"user_namespace", ex.cfg.UserNamespace, "pids", ex.cfg.Pids, "kube_api_qps", rc.QPS, "kube_api_burst", rc.Burst)
	return ex, nil
}

func ownerName(o *metav1.OwnerReference) string {
	if o == nil {
		return ""
	}
	return o.Kind + "/" + o.Name
}

// LoadClientConfig returns the client configuration by client-go's
// standard rules (an explicit kubeconfig; else KUBECONFIG; else
// ~/.kube/config; else, inside a cluster, the pod's ServiceAccount), so
// that exec credential plugins work unchanged, and the namespace: the
// namespace argument, else (in a cluster) the pod's own, else the
// context's, else "default". inCluster tells whether the ServiceAccount's
// configuration was used. Nothing is written anywhere.
func LoadClientConfig(kubeconfig, namespace string) (rc *rest.Config, ns string, inCluster bool, err error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	overrides := &clientcmd.ConfigOverrides{}
	if namespace != "" {
		overrides.Context.Namespace = namespace
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	rc, err = cc.ClientConfig()
	if err != nil {
		return nil, "", false, fmt.Errorf("kube executor: no client configuration: %w (give --kubeconfig, set KUBECONFIG, or run in a cluster with a ServiceAccount)", err)
	}
	ns, _, err = cc.Namespace()
	if err != nil {
		return nil, "", false, fmt.Errorf("kube executor: namespace: %w", err)
	}
	if namespace != "" {
		ns = namespace
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, "", false, fmt.Errorf("kube executor: namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	_, statErr := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token")
	inCluster = kubeconfig == "" && os.Getenv("KUBECONFIG") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" && statErr == nil
	return rc, ns, inCluster, nil
}

// OwnPod returns an owner reference to the pod this process runs in (its
// host name is the pod's name, Kubernetes' default), by UID, for job
// pods in the same namespace. Errors: the pod cannot be read.
func OwnPod(ctx context.Context, rc *rest.Config, ns string) (*metav1.OwnerReference, error) {
	name, err := ownPodName()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return ResolveOwner(ctx, client, ns, "pod", name)
}

// ownPodName is the name of the pod this process runs in: $POD_NAME (the
// downward API), else the host name (Kubernetes' default for a pod's).
func ownPodName() (string, error) {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name, nil
	}
	return os.Hostname()
}

// ParseNodeSelector reads KEY=VALUE pairs.
func ParseNodeSelector(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			return nil, fmt.Errorf("--node-selector %q: want KEY=VALUE with a label key and value", p)
		}
		m[k] = v
	}
	return m, nil
}

// ParseTolerations reads KEY[=VALUE][:EFFECT] (kubectl taint's syntax):
// with a value the operator is Equal, else Exists; no effect tolerates
// every effect.
func ParseTolerations(specs []string) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	for _, s := range specs {
		kv, effect, _ := strings.Cut(s, ":")
		k, v, hasV := strings.Cut(kv, "=")
		t := corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists}
		if hasV {
			t.Operator, t.Value = corev1.TolerationOpEqual, v
		}
		switch corev1.TaintEffect(effect) {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			t.Effect = corev1.TaintEffect(effect)
		default:
			return nil, fmt.Errorf("--toleration %q: the effect must be NoSchedule, PreferNoSchedule or NoExecute", s)
		}
		if k == "" || len(validation.IsQualifiedName(k)) > 0 {
			return nil, fmt.Errorf("--toleration %q: want KEY[=VALUE][:EFFECT]", s)
		}
		out = append(out, t)
	}
	return out, nil
}
