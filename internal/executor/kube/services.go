package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// ServiceContainerPrefix begins the name of each service's container in
// the job pod ("service-postgres"): a native sidecar (an init container
// with restartPolicy Always), started before the job's container.
const ServiceContainerPrefix = "service-"

// serviceSpec is one service of a job pod, resolved.
type serviceSpec struct {
	executor.Service
	CPU, Memory, Disk resource.Quantity
}

// services resolves spec's services against the runner's caps.
func (e *Executor) services(spec executor.Spec) ([]serviceSpec, error) {
	var out []serviceSpec
	for _, s := range spec.Services {
		r, err := e.caps.ServiceResources(s)
		if err != nil {
			return nil, err
		}
		out = append(out, serviceSpec{Service: s,
			CPU:    *resource.NewMilliQuantity(r.MilliCPUs, resource.DecimalSI),
			Memory: *resource.NewQuantity(r.Memory, resource.BinarySI),
			Disk:   *resource.NewQuantity(r.Disk, resource.BinarySI),
		})
	}
	return out, nil
}

// serviceContainers returns the native sidecar containers and their
// volumes for services (Kubernetes 1.29+: an init container with
// restartPolicy Always runs beside the main containers from before them;
// https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/).
// Each is hardened exactly as the job's container (csc, a copy), with
// requests equal to limits for cpu, memory and ephemeral-storage, its own
// /tmp (an emptyDir of its disk), and, for a service that asks for
// secrets, a memory emptyDir at executor.ServiceSecretsDir that only it
// mounts. Its env holds the workflow's plain variables only; its command
// is agentenv.ServiceCommand: nothing secret is in the spec.
func serviceContainers(services []serviceSpec, pull corev1.PullPolicy, csc *corev1.SecurityContext) ([]corev1.Container, []corev1.Volume) {
	var cs []corev1.Container
	var vols []corev1.Volume
	for _, s := range services {
		res := corev1.ResourceList{
			corev1.ResourceCPU:              s.CPU.DeepCopy(),
			corev1.ResourceMemory:           s.Memory.DeepCopy(),
			corev1.ResourceEphemeralStorage: s.Disk.DeepCopy(),
		}
		tmp := s.Disk.DeepCopy()
		vols = append(vols, corev1.Volume{Name: "service-" + s.Name + "-tmp", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &tmp},
		}})
		mounts := []corev1.VolumeMount{{Name: "service-" + s.Name + "-tmp", MountPath: Tmp}}
		if len(s.Secrets) > 0 {
			size := resource.MustParse("1Mi")
			vols = append(vols, corev1.Volume{Name: "service-" + s.Name + "-secrets", VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size},
			}})
			mounts = append(mounts, corev1.VolumeMount{Name: "service-" + s.Name + "-secrets", MountPath: executor.ServiceSecretsDir})
		}
		var env []corev1.EnvVar
		for _, k := range slices.Sorted(mapKeys(s.Env)) {
			env = append(env, corev1.EnvVar{Name: k, Value: s.Env[k]})
		}
		cs = append(cs, corev1.Container{
			Name:            ServiceContainerPrefix + s.Name,
			Image:           s.Image,
			ImagePullPolicy: pull,
			Command:         agentenv.ServiceCommand(s.Service),
			Env:             env,
			RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
			Resources:       corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()},
			SecurityContext: csc.DeepCopy(),
			VolumeMounts:    mounts,
			// The default File policy: a service's log may hold what it
			// was given, so it never becomes the status's message.
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		})
	}
	return cs, vols
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// serviceName is the service a container name is of, "" for another
// container.
func serviceName(container string) string {
	name, ok := strings.CutPrefix(container, ServiceContainerPrefix)
	if !ok {
		return ""
	}
	return name
}

// serviceFault is the fault of a job pod's service that cannot start or
// stopped: an image that cannot be pulled past pullGrace (image-pull,
// naming the service), a container the kubelet cannot create (executor),
// one that exited or was restarted (service, with its exit code: it must
// run until the job's container ends); nil when every service runs or
// starts.
func serviceFault(pod *corev1.Pod, now, since time.Time, pullGrace time.Duration) *executor.Fault {
	for _, ic := range pod.Status.InitContainerStatuses {
		name := serviceName(ic.Name)
		if name == "" {
			continue
		}
		switch w := ic.State.Waiting; stuckWaiting(w, now.Sub(since), pullGrace) {
		case api.ReasonImagePull:
			return &executor.Fault{Reason: api.ReasonImagePull, Message: fmt.Sprintf("service %s: image %s cannot be pulled: %s: %s", name, ic.Image, w.Reason, w.Message)}
		case api.ReasonExecutor:
			return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("service %s (image %s) cannot start: %s: %s", name, ic.Image, w.Reason, w.Message)}
		}
		if t := lastEnd(ic); t != nil {
			msg := fmt.Sprintf("service %s (image %s) exited with code %d (%s)", name, ic.Image, t.ExitCode, t.Reason)
			if t.Reason == "OOMKilled" {
				msg = fmt.Sprintf("service %s (image %s) was killed for exceeding its memory limit", name, ic.Image)
			}
			if m := strings.TrimSpace(t.Message); m != "" {
				msg += ": " + m
			}
			return &executor.Fault{Reason: api.ReasonService, Message: msg + "; its log is in the setup log"}
		}
	}
	return nil
}

// serviceNote is what a Pending pod's services wait for ("service
// postgres: ImagePullBackOff ..."), "" when none waits for more than its
// container's creation.
func serviceNote(pod *corev1.Pod) string {
	for _, ic := range pod.Status.InitContainerStatuses {
		if name := serviceName(ic.Name); name != "" && ic.State.Waiting != nil && ic.State.Waiting.Reason != "ContainerCreating" && ic.State.Waiting.Reason != "PodInitializing" {
			return strings.TrimSpace("service " + name + ": " + ic.State.Waiting.Reason + " " + ic.State.Waiting.Message)
		}
	}
	return ""
}

// podServices is the agentenv.Services of one job pod: exec into its
// containers, its services' logs (pods/log get; without it a log cannot
// be read, and says so).
type podServices struct {
	e   *Executor
	pod string
}

// Exec implements agentenv.Services.
func (p podServices) Exec(ctx context.Context, name string, argv []string, stdin []byte) ([]byte, int, error) {
	container := Container
	if name != "" {
		container = ServiceContainerPrefix + name
	}
	exe, err := PodExec(p.e.rest, p.e.client, p.e.ns, p.pod, container, argv, stdin != nil)
	if err != nil {
		return nil, -1, err
	}
	out := &agentenv.CappedBuffer{Max: 64 << 10}
	opts := remotecommand.StreamOptions{Stdout: out, Stderr: out}
	if stdin != nil {
		opts.Stdin = bytes.NewReader(stdin)
	}
	err = exe.StreamWithContext(ctx, opts)
	var code exec.CodeExitError
	if errors.As(err, &code) {
		return out.Bytes(), code.Code, nil
	}
	if err != nil {
		return out.Bytes(), -1, err
	}
	return out.Bytes(), 0, nil
}

// Log implements agentenv.Services: the end of the container's log
// through pods/log (its last 2000 lines, then at most max bytes; both
// streams, as the kubelet keeps them). A service
// restarted by the kubelet has the log of its latest start.
func (p podServices) Log(ctx context.Context, name string, max int64) ([]byte, error) {
	req := p.e.client.CoreV1().Pods(p.e.ns).GetLogs(p.pod, &corev1.PodLogOptions{
		Container: ServiceContainerPrefix + name, TailLines: ptr.To[int64](2000),
	})
	rc, err := req.Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the log of container %s of pod %s (the Role needs get on pods/log): %w", ServiceContainerPrefix+name, p.pod, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if int64(len(b)) > max {
		b = b[int64(len(b))-max:]
	}
	return b, err
}
