package kube

import (
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// validLabelKey is a label key (an optional DNS prefix, a name) that a
// Spec's labels must match to reach the pod.
var validLabelKey = regexp.MustCompile(`^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// Paths inside the job pod (see agentenv): each is an emptyDir with a
// sizeLimit; the root file system is read-only.
const (
	// Container is the job pod's only container.
	Container   = "job"
	AgentDir    = agentenv.AgentDir
	AgentSocket = agentenv.AgentSocket
	Workspace   = agentenv.Workspace
	Home        = agentenv.Home
	Tmp         = agentenv.Tmp
	// AgentPath is where the step agent's program is delivered.
	AgentPath = AgentDir + "/knotless-agent"
	// startFIFO is the named pipe PID 1 waits on until the agent has
	// been delivered.
	startFIFO = AgentDir + "/start"
)

// deadlineMargin is added to the run's timeout for the pod's
// activeDeadlineSeconds: Knotless's own timeout (the runner's and the
// agent's --deadline) fires first and ends the step with its log; the
// kubelet's deadline only catches a pod nobody ends.
const deadlineMargin = 2 * time.Minute

// RunAs is the executors' shared --run-as (executor.RunAs).
type RunAs = executor.RunAs

// podSpec is what podFor needs to build one job pod.
type podSpec struct {
	Namespace    string
	GenerateName string
	Labels       map[string]string
	Image        string
	CPU          resource.Quantity
	Memory       resource.Quantity
	Disk         resource.Quantity
	Deadline     time.Duration // the run's timeout; activeDeadlineSeconds adds deadlineMargin
	RunAs        RunAs
	RuntimeClass string
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	PullSecrets  []string
	PullPolicy   corev1.PullPolicy
	Owner        *metav1.OwnerReference
	// Command is PID 1's argv: a shell that waits for the agent and execs
	// it (bootstrapCommand).
	Command []string
	// Services become native sidecars (serviceContainers).
	Services []serviceSpec
	// UserNamespace asks for a user namespace of the pod's own
	// (spec.hostUsers false): the pod's uids are an unprivileged range on
	// the node. With RunAs.Image the image's own user may then be root:
	// runAsNonRoot is left out (Pod Security "restricted" does not check
	// it for such pods).
	UserNamespace bool
	// Builder, when set, is the builder sidecar of a builds pod
	// (builderSidecar); its socket's directory is mounted in the job's
	// container at BuilderShare.
	Builder *builderSpec
}

// podFor returns the job pod for spec, hardened to pass Pod Security
// "restricted" (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
// spec.hostUsers false when spec.UserNamespace; spec.securityContext
// runAsNonRoot (unless RunAs.Image in a user namespace),
// runAsUser/runAsGroup/fsGroup (unless RunAs.Image), seccompProfile
// RuntimeDefault; the container with
// readOnlyRootFilesystem, allowPrivilegeEscalation false, capabilities
// drop ALL; automountServiceAccountToken false, enableServiceLinks false,
// no host namespaces or paths; requests equal to limits for cpu, memory
// and ephemeral-storage (QoS Guaranteed); emptyDirs with sizeLimit Disk
// for AgentDir, Workspace, Home and Tmp; restartPolicy Never;
// activeDeadlineSeconds the run's timeout plus deadlineMargin; a 2 s
// termination grace (the agent as PID 1 exits on SIGTERM at once); the
// run's services as native sidecars hardened the same
// (serviceContainers). Nothing secret is in it: no env, the command is
// the fixed bootstrap.
func podFor(s podSpec) *corev1.Pod {
	res := corev1.ResourceList{
		corev1.ResourceCPU:              s.CPU.DeepCopy(),
		corev1.ResourceMemory:           s.Memory.DeepCopy(),
		corev1.ResourceEphemeralStorage: s.Disk.DeepCopy(),
	}
	psc := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	csc := &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		ReadOnlyRootFilesystem:   ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Privileged:               ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if s.RunAs.Image && s.UserNamespace {
		psc.RunAsNonRoot, csc.RunAsNonRoot = nil, nil
	}
	if !s.RunAs.Image {
		gid := s.RunAs.Group()
		psc.RunAsUser, psc.RunAsGroup, psc.FSGroup = ptr.To(s.RunAs.UID), ptr.To(gid), ptr.To(gid)
		csc.RunAsUser, csc.RunAsGroup = ptr.To(s.RunAs.UID), ptr.To(gid)
	}
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range []struct{ name, path string }{
		{"knotless", AgentDir}, {"workspace", Workspace}, {"home", Home}, {"tmp", Tmp},
	} {
		limit := s.Disk.DeepCopy()
		volumes = append(volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: v.name, MountPath: v.path})
	}
	deadline := int64((s.Deadline + deadlineMargin + time.Second - 1) / time.Second)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: s.GenerateName,
			Namespace:    s.Namespace,
			Labels:       s.Labels,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			ActiveDeadlineSeconds:         ptr.To(deadline),
			SecurityContext:               psc,
			NodeSelector:                  s.NodeSelector,
			Tolerations:                   s.Tolerations,
			Containers: []corev1.Container{{
				Name:            Container,
				Image:           s.Image,
				ImagePullPolicy: s.PullPolicy,
				Command:         s.Command,
				WorkingDir:      Workspace,
				// A container that fails (its PID 1 cannot execute: an
				// image or an agent of another architecture) has the end
				// of its log as its status's message, which podFault reads
				// without the pods/log permission. The log is the agent's
				// own (steps write to files): never a secret.
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				Resources:                corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()},
				SecurityContext:          csc,
				VolumeMounts:             mounts,
			}},
			Volumes: volumes,
		},
	}
	if s.Builder != nil {
		c, vols, mount := builderSidecar(*s.Builder, res, s.Disk)
		c.ImagePullPolicy = s.PullPolicy
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
		pod.Spec.Volumes = append(pod.Spec.Volumes, vols...)
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, mount)
	}
	if len(s.Services) > 0 {
		cs, vols := serviceContainers(s.Services, s.PullPolicy, csc)
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, cs...)
		pod.Spec.Volumes = append(pod.Spec.Volumes, vols...)
	}
	if s.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = ptr.To(s.RuntimeClass)
	}
	if s.UserNamespace {
		pod.Spec.HostUsers = ptr.To(false)
	}
	for _, name := range s.PullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	if s.Owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*s.Owner}
	}
	return pod
}

// podPlan is one job pod as jobPod builds it: the pod to create and the
// values the setup log names (logPod).
type podPlan struct {
	pod            *corev1.Pod
	image          string
	cpu, mem, disk resource.Quantity
	services       []serviceSpec
	builder        *builderSpec // nil but in the builds namespace
	userns         bool
}

// jobPod builds the job pod of spec's run (warm: of no run, for the warm
// pool) from the executor's Config, without a call to the API server: the
// image and resources the workflow asks for within the runner's caps, its
// services, its node selector, its labels (the runner's, the run's and
// the spec's valid ones), activeDeadlineSeconds from spec.Timeout (an
// hour when 0; warmDeadline for a warm pod), a user namespace when
// userns, the builder sidecar in the builds namespace, and PID 1's
// command from serve (bootstrapCommand: its Deadline is the only time in
// the pod). The pod has a GenerateName: the API server names it. Errors:
// what Caps refuses (more than the runner allows: a *executor.Fault), an
// arch: the runner's --node-selector contradicts.
func (e *Executor) jobPod(spec executor.Spec, serve agent.Serve, warm, userns bool) (podPlan, error) {
	image, res, err := e.caps.ImageAndResources(spec, e.cfg.Image)
	if err != nil {
		return podPlan{}, err
	}
	p := podPlan{image: image, userns: userns,
		cpu:  *resource.NewMilliQuantity(res.MilliCPUs, resource.DecimalSI),
		mem:  *resource.NewQuantity(res.Memory, resource.BinarySI),
		disk: *resource.NewQuantity(res.Disk, resource.BinarySI),
	}
	if p.services, err = e.services(spec); err != nil {
		return podPlan{}, err
	}
	selector, err := e.nodeSelector(spec)
	if err != nil {
		return podPlan{}, err
	}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = time.Hour
	}
	lbl := map[string]string{agentenv.LabelManagedBy: agentenv.ManagedBy, agentenv.LabelRunner: labelValue(e.cfg.Runner), agentenv.LabelRun: labelValue(spec.ID)}
	if warm {
		lbl[LabelWarm] = "true"
		timeout = warmDeadline
	}
	for k, v := range spec.Labels {
		if _, ok := lbl[k]; !ok && validLabelKey.MatchString(k) {
			lbl[k] = labelValue(v)
		}
	}
	if userns {
		serve.Nproc = e.cfg.Pids
	}
	if e.cfg.builder {
		p.builder = &builderSpec{Image: e.cfg.BuilderImage, SeccompProfile: e.cfg.BuilderSeccompProfile, GID: e.cfg.RunAs.Group()}
		serve.PathAppend = BuilderShare + "/bin"
	}
	p.pod = podFor(podSpec{
		Namespace: e.ns, GenerateName: podNamePrefix(spec.ID), Labels: lbl, Image: image,
		CPU: p.cpu, Memory: p.mem, Disk: p.disk, Deadline: timeout, RunAs: e.cfg.RunAs,
		RuntimeClass: e.cfg.RuntimeClass, NodeSelector: selector, Tolerations: e.cfg.Tolerations,
		PullSecrets: e.cfg.PullSecrets, PullPolicy: e.cfg.PullPolicy, Owner: e.cfg.Owner,
		Command: bootstrapCommand(serve), Services: p.services, UserNamespace: userns, Builder: p.builder,
	})
	return p, nil
}

// bootstrapCommand is PID 1 of the job container until the agent is
// there: a POSIX shell that waits until the first exec has delivered the
// agent's program (AgentPath made executable), then replaces itself with
// the agent (exec), which becomes PID 1: it reaps orphans and exits on
// SIGTERM, so the pod ends at once when deleted. It waits blocked on a
// named pipe it holds open for reading and writing (startFIFO; the
// delivery's `knotless-agent connect --wake` writes to it), or, in an
// image without mkfifo, by polling every 50 ms. It makes the pipe before
// it looks for the program, and the delivery makes the program executable
// before it wakes the pipe, so no wake-up is lost. Every argument is
// fixed or derived from the run's ID and deadline: nothing secret.
func bootstrapCommand(serve agent.Serve) []string {
	serve = agentenv.ContainerServe(serve)
	serve.Program = AgentPath // a step may remove it: the agent restores it
	agentArgs := append([]string{AgentPath}, serve.Args()...)
	quoted := make([]string, len(agentArgs))
	for i, a := range agentArgs {
		quoted[i] = shellQuote(a)
	}
	script := `a=` + AgentPath + `; f=` + startFIFO + `; ` +
		`if [ -p "$f" ] || mkfifo "$f" 2>/dev/null; then until [ -x "$a" ]; do read -r go 0<>"$f"; done; ` +
		`else until [ -x "$a" ]; do sleep 0.05 2>/dev/null || sleep 1; done; fi; ` +
		`exec ` + strings.Join(quoted, " ")
	return []string{"/bin/sh", "-c", script}
}

// deliverScript is the first exec's shell script. Unless the agent
// listens already (a retried delivery), it asks for the program with the
// pod's machine (line lineSendAgent and `uname -m`, "unknown" without
// uname), reads its size (one line: the size, and optionally the machine
// the runner sent it for before it asked, which must be this one unless
// uname is missing; else it exits 97 reading nothing more) and exactly
// that many bytes of it
// from STDIN (dd of whole 64 KiB blocks and head -c of the rest, or head
// -c alone where dd fails before reading; the runner sends nothing more
// before the next line, so nothing is read ahead, and the reader never
// depends on STDIN's end), checks the count and makes it executable. Then
// it wakes PID 1 (bootstrapCommand), says lineDelivered and becomes
// `knotless-agent connect`, which wakes PID 1 again while it waits for the
// agent's socket: the same exec carries the agent protocol. Tools it needs
// in the image: sh, head, wc, chmod (uname, dd and stat optional).
func deliverScript() string {
	return `set -e; umask 077; a=` + AgentPath + `; ` +
		`if [ ! -S ` + AgentSocket + ` ]; then u=$(uname -m 2>/dev/null || echo unknown); echo ` + lineSendAgent + ` "$u"; ` +
		// A runner that sent before it was asked names the machine it
		// sent for: another one here reads nothing and ends (97).
		`read -r n m; ` +
		`if [ -n "$m" ] && [ "$u" != unknown ] && [ "$m" != "$u" ]; then echo "knotless: an agent for machine $m was sent, this pod's is $u" >&2; exit 97; fi; ` +
		// dd in 64 KiB blocks where it can (busybox's head -c, the
		// job-base image's, moves ~10× less per CPU second, and a job
		// pod's CPU limit binds), else head -c: an unknown dd or flag
		// fails before it reads a byte. The size check below catches any
		// other mishap.
		`if dd bs=65536 count=$((n / 65536)) iflag=fullblock of="$a" 2>/dev/null; then head -c $((n % 65536)) >> "$a"; else head -c "$n" > "$a"; fi; ` +
		// The size from the file's inode (stat), else by reading it
		// (wc -c: busybox's reads byte by byte, 30-50 ms for the agent in a
		// job pod).
		`got=$(stat -c %s "$a" 2>/dev/null || wc -c < "$a"); ` +
		`[ "$got" -eq "$n" ] || { echo "knotless: the agent arrived truncated: $got of $n bytes" >&2; exit 98; }; ` +
		`chmod 0500 "$a"; fi; ` +
		// Wake PID 1 now, so that the agent's start there overlaps the
		// connect's start here (read-write: never blocks, with or without
		// a reader; `connect --wake` wakes it again while it waits).
		`if [ -p ` + startFIFO + ` ]; then echo go 1<>` + startFIFO + `; fi; ` +
		`echo ` + lineDelivered + `; exec "$a" ` + strings.Join(agent.Connect{Socket: AgentSocket, Wait: 30 * time.Second, Wake: startFIFO}.Args(), " ")
}

func shellQuote(s string) string {
	if s != "" && safeShellWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var safeShellWord = regexp.MustCompile(`^[A-Za-z0-9_./:=+,@-]+$`)

// labelValue makes s a valid label value: at most 63 of [A-Za-z0-9._-],
// starting and ending alphanumeric (others become '-').
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	s = string(b)
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "._-")
}

// podNamePrefix is the GenerateName of a run's pod: "knotless-" and the
// run's ID in lower case (a DNS-1123 label, room left for the API
// server's 5 random characters).
func podNamePrefix(id string) string {
	b := []byte(strings.ToLower(id))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	s := "knotless-" + string(b)
	if len(s) > 50 {
		s = s[:50]
	}
	return strings.TrimRight(s, "-") + "-"
}

// BenchPod is the job pod Prepare makes with the default Config, for a
// benchmark's bare baseline to create the very same pod: its container is
// named container and runs a shell as PID 1 that exits on SIGTERM (as the
// agent does), instead of the bootstrap that waits for the agent.
func BenchPod(namespace, container string) *corev1.Pod {
	p := podFor(podSpec{
		Namespace: namespace, GenerateName: "bare-", Image: "localhost/knotless/job-base:1",
		Labels: map[string]string{agentenv.LabelManagedBy: "kubetest"},
		CPU:    resource.MustParse(executor.DefaultCPUs), Memory: *resource.NewQuantity(128<<20, resource.BinarySI),
		Disk: *resource.NewQuantity(256<<20, resource.BinarySI), Deadline: time.Hour, RunAs: executor.DefaultRunAs,
		PullPolicy: corev1.PullNever,
		Command:    []string{"/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
	})
	p.Spec.Containers[0].Name = container
	return p
}
