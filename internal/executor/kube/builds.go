package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// Container builds (a workflow's `container-builds: true`,
// docs/container-builds.md) run in a namespace of their own, which the
// operator labels Pod Security "baseline" (--builds-namespace), while
// ordinary runs stay in the restricted one. An Executor with builds
// allowed holds a second Executor for that namespace (builds): its pods
// are job pods as ever plus a builder, a BuildKit sidecar (builderSidecar)
// in a user namespace that they always have. Prepare sends a builds run
// there and an ordinary run never; Recover, Find, Sweep, Close and the
// counts cover both.

// DefaultBuilderSeccompProfile is the builder's Localhost seccomp profile,
// relative to the kubelet's seccomp directory
// (/var/lib/kubelet/seccomp/knotless/builder.json): what
// deploy/kubernetes/builds writes on every node.
const DefaultBuilderSeccompProfile = "knotless/builder.json"

// newBuilds makes the builds Executor of cfg when cfg.BuildsNamespace is
// set (nil otherwise): cfg in that namespace, pods with a builder of
// cfg.BuilderImage, always in a user namespace, no warm pods, no owner
// reference (Kubernetes allows no owner in another namespace). Errors: an
// invalid namespace, the job pods' own namespace, no builder image.
func newBuilds(cfg Config) (*Executor, error) {
	if cfg.BuildsNamespace == "" {
		return nil, nil
	}
	if errs := validation.IsDNS1123Label(cfg.BuildsNamespace); len(errs) > 0 {
		return nil, fmt.Errorf("--builds-namespace %q: %s", cfg.BuildsNamespace, strings.Join(errs, "; "))
	}
	if cfg.BuildsNamespace == cfg.Namespace {
		return nil, fmt.Errorf("--builds-namespace %s is the job pods' own namespace: give builds a namespace of their own, labelled Pod Security baseline, so that ordinary job pods stay in a restricted one (docs/container-builds.md)", cfg.BuildsNamespace)
	}
	if cfg.BuilderImage == "" {
		return nil, fmt.Errorf("--builds-namespace %s needs --builder-image: the image of the builder (BuildKit; docs/container-builds.md says how to make it)", cfg.BuildsNamespace)
	}
	b := cfg
	b.Namespace, b.BuildsNamespace = cfg.BuildsNamespace, ""
	b.WarmPods, b.UserNamespace, b.builder = 0, UserNamespaceRequired, true
	// An owner in another namespace counts as absent to the garbage
	// collector, which would delete the pods at once: builds pods have
	// none (the runner's start sweeps what a lost runner left there).
	b.Owner = nil
	if b.BuilderSeccompProfile == "" {
		b.BuilderSeccompProfile = DefaultBuilderSeccompProfile
	}
	return New(b)
}

// refuseBuilds is the fault of a builds run on a runner that allows none:
// before any pod exists, naming the flag (unsupported: never retried).
func (e *Executor) refuseBuilds() error {
	return &executor.Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf(
		"this workflow asks for container-builds: true, and runner %s does not allow image builds: its operator gives the kube executor --builds-namespace NAME (a namespace labelled Pod Security baseline) and --builder-image (docs/container-builds.md)",
		strings.TrimSpace(e.cfg.Runner))}
}

// Prepare makes the run's environment (agentenv.Base's): a builds run's in
// the builds namespace, or refused when builds are not allowed; any other
// run's in the job pods' namespace.
func (e *Executor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	if spec.ContainerBuilds && !e.cfg.builder {
		if e.builds == nil {
			return nil, e.refuseBuilds()
		}
		return e.builds.Prepare(ctx, spec)
	}
	if !spec.ContainerBuilds && e.cfg.builder {
		return nil, fmt.Errorf("kube executor: the builds namespace %s takes builds only", e.ns)
	}
	return e.Base.Prepare(ctx, spec)
}

// Recover reattaches to a run's pod, in whichever namespace its handle
// names.
func (e *Executor) Recover(ctx context.Context, h executor.Handle) (executor.Session, error) {
	if e.builds != nil {
		var d handleData
		if json.Unmarshal(h.Data, &d) == nil && d.Namespace == e.builds.ns {
			return e.builds.Recover(ctx, h)
		}
	}
	return e.Base.Recover(ctx, h)
}

// sweepBuilds sweeps the builds namespace's pods no run holds.
func (e *Executor) sweepBuilds(ctx context.Context, keep []string) error {
	if e.builds == nil {
		return nil
	}
	return e.builds.Sweep(ctx, keep)
}

// buildsFact says whether and where this runner builds images.
func (e *Executor) buildsFact() string {
	if e.builds == nil {
		return "not allowed (--builds-namespace)"
	}
	return fmt.Sprintf("in namespace %s, builder image %s, seccomp profile Localhost %s", e.builds.ns, e.cfg.BuilderImage, e.builds.cfg.BuilderSeccompProfile)
}

// The builder sidecar of a builds pod.
const (
	// BuilderContainer is the builder's container (a native sidecar).
	BuilderContainer = "builder"
	// BuilderShare is where the builder's socket and client are, in the
	// builder's container and the job's: buildctl's default address is
	// unix:///run/buildkit/buildkitd.sock, and steps find buildctl in
	// BuilderShare/bin (the agent's --path-append).
	BuilderShare = "/run/buildkit"
)

// builderSpec is what podFor needs for the builder sidecar.
type builderSpec struct {
	Image string
	// SeccompProfile is the Localhost profile, relative to the kubelet's
	// seccomp directory.
	SeccompProfile string
	// GID is the group the socket belongs to (the job's); -1 makes it
	// 0666 instead (the job runs as the image's own user).
	GID int64
}

// builderSidecar returns the builder's container and the volumes it adds,
// and the mount the job's container gets. The container is a native
// sidecar (an init container with restartPolicy Always, started before
// the job's container once `buildctl debug workers` answers) running
// knotless-builder, which runs buildkitd in a user and mount namespace
// nested in the pod's: as the pod's root (uid 0 of the pod's user
// namespace, an unprivileged uid on the node), not privileged, no
// privilege escalation, a read-only root file system, capabilities
// dropped but SETUID, SETGID and SETFCAP (to write the nested
// namespace's maps), /proc unmasked (procMount: Unmasked, for the build
// steps' own /proc) and the Localhost seccomp profile (RuntimeDefault
// plus what the nested namespace needs). Pod Security "baseline" admits
// it in a pod with hostUsers false, "restricted" does not. Its
// resources are the job's (its build steps run in it); its state
// (/var/lib/buildkit) and /tmp are emptyDirs of the job's disk size.
func builderSidecar(b builderSpec, res corev1.ResourceList, disk resource.Quantity) (corev1.Container, []corev1.Volume, corev1.VolumeMount) {
	always := corev1.ContainerRestartPolicyAlways
	args := []string{"--share=" + BuilderShare}
	if b.GID < 0 {
		args = append(args, "--open-socket")
	}
	args = append(args, "--", "buildkitd", "--root=/var/lib/buildkit")
	if b.GID >= 0 {
		args = append(args, fmt.Sprintf("--group=%d", b.GID))
	}
	limit := disk.DeepCopy()
	runLimit := resource.MustParse("16Mi")
	shareLimit := resource.MustParse("128Mi")
	vols := []corev1.Volume{
		{Name: "builder-share", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &shareLimit}}},
		{Name: "builder-state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}},
		{Name: "builder-tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(disk.DeepCopy())}}},
		{Name: "builder-run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &runLimit}}},
	}
	c := corev1.Container{
		Name:          BuilderContainer,
		Image:         b.Image,
		Args:          args,
		RestartPolicy: &always,
		Resources:     corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](0),
			RunAsGroup:               ptr.To[int64](0),
			RunAsNonRoot:             ptr.To(false),
			Privileged:               ptr.To(false),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			ProcMount:                ptr.To(corev1.UnmaskedProcMount),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"SETUID", "SETGID", "SETFCAP"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To(b.SeccompProfile)},
		},
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"buildctl", "debug", "workers"}}},
			PeriodSeconds:    1,
			TimeoutSeconds:   10,
			FailureThreshold: 120,
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "builder-run", MountPath: "/run"},
			{Name: "builder-share", MountPath: BuilderShare},
			{Name: "builder-state", MountPath: "/var/lib/buildkit"},
			{Name: "builder-tmp", MountPath: "/tmp"},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	return c, vols, corev1.VolumeMount{Name: "builder-share", MountPath: BuilderShare}
}

// builderFault is the fault of a builds pod whose builder cannot run: its
// image cannot be pulled past pullGrace (image-pull), the kubelet cannot
// create it (executor; a missing seccomp profile names the manifest that
// installs it), or it exited (executor, with the end of its log).
func builderFault(pod *corev1.Pod, now, since time.Time, pullGrace time.Duration) *executor.Fault {
	for _, ic := range pod.Status.InitContainerStatuses {
		if ic.Name != BuilderContainer {
			continue
		}
		switch w := ic.State.Waiting; stuckWaiting(w, now.Sub(since), pullGrace) {
		case api.ReasonImagePull:
			return &executor.Fault{Reason: api.ReasonImagePull, Message: fmt.Sprintf("the builder image %s (--builder-image) cannot be pulled: %s: %s", ic.Image, w.Reason, w.Message)}
		case api.ReasonExecutor:
			msg := fmt.Sprintf("the builder (image %s) cannot start: %s: %s", ic.Image, w.Reason, w.Message)
			if strings.Contains(w.Message, "seccomp") {
				msg += "; install the builder's seccomp profile on every node that runs builds (deploy/kubernetes/builds, docs/container-builds.md)"
			}
			return &executor.Fault{Reason: api.ReasonExecutor, Message: msg}
		}
		if t := lastEnd(ic); t != nil {
			msg := fmt.Sprintf("the builder (image %s) exited with code %d (%s)", ic.Image, t.ExitCode, t.Reason)
			if m := strings.TrimSpace(t.Message); m != "" {
				msg += ": " + m
			}
			return &executor.Fault{Reason: api.ReasonExecutor, Message: msg}
		}
	}
	return nil
}

// builderEnded reports whether pod's builder has terminated (and not
// restarted): on its own, or stopped by the kubelet's eviction of the pod
// before the pod's status says so.
func builderEnded(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, ic := range pod.Status.InitContainerStatuses {
		if ic.Name == BuilderContainer && ic.State.Terminated != nil {
			return true
		}
	}
	return false
}
