package kwok

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

var execGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "execs"}

// PodHost plays, on this machine, the part of the container runtime for
// the pods of Namespace: for each pod, as soon as it exists (before the
// scheduler binds it, which a kubelet would wait for), it makes a directory
// (PodDirEnv), an Exec object that sends the pod's execs to the pod shell
// with that directory, and starts the pod's first container's command
// (its command and args, its env) through the pod shell: the kube
// executor's PID 1, which waits for the agent the first exec delivers. A
// pod deleted loses its processes (SIGKILL to the process group), its
// Exec object and its directory. Only the first container runs; init
// containers, images, resources, users and the pod's security context are
// not applied (the processes run as this program's user).
type PodHost struct {
	cp    *ControlPlane
	dyn   dynamic.Interface
	shell string
	log   *slog.Logger

	mu      sync.Mutex
	procs   map[string]*os.Process // by pod name
	started int
	seen    map[string]*PodTimes // by pod name
	first   *corev1.Pod          // the first pod seen that is no filler
}

// FillerLabel marks pods PodHost leaves alone (no process, no Exec): the
// benchmark's stand-ins for job pods that only need to exist.
const FillerLabel = "kwok.knotless.dev/filler"

// PodTimes is when PodHost's informer first saw a pod, and saw it Running
// (kwok's pod-ready stage), by this machine's clock; Labels are its
// labels then.
type PodTimes struct {
	Labels           map[string]string
	Created, Running time.Time
}

// StartPodHost starts a PodHost over cp's Namespace; it stops with ctx.
// Errors: the client's.
func (cp *ControlPlane) StartPodHost(ctx context.Context, log *slog.Logger) (*PodHost, error) {
	cfg := &rest.Config{Host: cp.Server, BearerToken: Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	h := &PodHost{cp: cp, dyn: dyn, shell: filepath.Join(cp.Dir, "bin", "podshell"), log: log, procs: map[string]*os.Process{}, seen: map[string]*PodTimes{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(Namespace))
	inf := f.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { h.sync(ctx, o) },
		UpdateFunc: func(_, o any) { h.sync(ctx, o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				h.remove(p.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		h.mu.Lock()
		defer h.mu.Unlock()
		for name, p := range h.procs {
			_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
			delete(h.procs, name)
		}
	}()
	return h, nil
}

// Started returns how many pods' first processes started.
func (h *PodHost) Started() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started
}

func (h *PodHost) dir(pod string) string { return filepath.Join(h.cp.Dir, "pods", pod) }

// Times returns a copy of what PodHost saw of each pod, by pod name.
func (h *PodHost) Times() map[string]PodTimes {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]PodTimes, len(h.seen))
	for k, v := range h.seen {
		out[k] = *v
	}
	return out
}

// FirstPod returns a copy of the first pod PodHost saw that is no filler
// (as the informer first saw it), nil before any.
func (h *PodHost) FirstPod() *corev1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.first == nil {
		return nil
	}
	return h.first.DeepCopy()
}

// observe records when a pod was first seen and seen Running.
func (h *PodHost) observe(p *corev1.Pod) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.first == nil {
		h.first = p.DeepCopy()
	}
	t := h.seen[p.Name]
	if t == nil {
		t = &PodTimes{Labels: p.Labels, Created: now}
		h.seen[p.Name] = t
	}
	if t.Running.IsZero() && p.Status.Phase == corev1.PodRunning {
		t.Running = now
	}
}

// sync starts a bound pod's first process once, unless it is being
// deleted or is a filler.
func (h *PodHost) sync(ctx context.Context, o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	if _, filler := p.Labels[FillerLabel]; filler {
		return
	}
	h.observe(p)
	if p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 {
		return
	}
	h.mu.Lock()
	if _, ok := h.procs[p.Name]; ok {
		h.mu.Unlock()
		return
	}
	h.procs[p.Name] = nil // claimed; set below
	h.mu.Unlock()
	// At first sight, not once bound, and beside the informer's handler:
	// made serially once bound, under load the Exec objects lagged the
	// pods by over a minute and deliveries ended with kwok's "no exec
	// found" (19 of 1,000 runs).
	go func() {
		if err := h.start(ctx, p); err != nil {
			h.log.Warn("kwok pod host: start pod", "pod", p.Name, "err", err)
		}
	}()
}

func (h *PodHost) start(ctx context.Context, p *corev1.Pod) error {
	dir := h.dir(p.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	user := podUser(p)
	ex := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
		"metadata": map[string]any{"name": p.Name, "namespace": p.Namespace},
		"spec": map[string]any{"execs": []any{map[string]any{"local": map[string]any{
			"envs": []any{map[string]any{"name": PodDirEnv, "value": dir}, map[string]any{"name": PodUserEnv, "value": user}},
		}}}},
	}}
	if _, err := h.dyn.Resource(execGVR).Namespace(p.Namespace).Create(ctx, ex, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Exec %s: %w", p.Name, err)
	}
	c := p.Spec.Containers[0]
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) == 0 {
		return fmt.Errorf("pod %s: its container has no command (the image's entrypoint is not known here)", p.Name)
	}
	env := []string{PodDirEnv + "=" + dir, PodUserEnv + "=" + user}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	args := append([]string{"-c", `exec "$0" "$@"`}, argv...)
	cmd, _, err := startLogged(h.shell, filepath.Join(dir, "pid1.log"), env, args...)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.procs[p.Name] = cmd.Process
	h.started++
	h.mu.Unlock()
	return nil
}

// podUser is the UID:GID the pod's first container runs as (its security
// context's, else the pod's), "" for root; a GID missing is the UID.
func podUser(p *corev1.Pod) string {
	var uid, gid *int64
	if sc := p.Spec.SecurityContext; sc != nil {
		uid, gid = sc.RunAsUser, sc.RunAsGroup
	}
	if sc := p.Spec.Containers[0].SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
	}
	if uid == nil || *uid == 0 {
		return ""
	}
	if gid == nil {
		gid = uid
	}
	return fmt.Sprintf("%d:%d", *uid, *gid)
}

// remove ends a deleted pod's processes and removes its Exec object and
// directory.
func (h *PodHost) remove(pod string) {
	h.mu.Lock()
	proc, ok := h.procs[pod]
	delete(h.procs, pod)
	h.mu.Unlock()
	if !ok {
		return
	}
	if proc != nil {
		_ = syscall.Kill(-proc.Pid, syscall.SIGKILL)
	}
	_ = h.dyn.Resource(execGVR).Namespace(Namespace).Delete(context.Background(), pod, metav1.DeleteOptions{})
	_ = os.RemoveAll(h.dir(pod))
}
