package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// driver is the kube executor's agentenv.Driver: an environment is a job
// pod with the agent as its PID 1.
type driver Executor

// Make makes the run's job pod (jobPod: hardened, one per run, never
// reused), waits until its container runs, and delivers the step agent
// over the first exec, which becomes the first connection to it; the
// checkout at spec.Workspace is copied into agentenv.Workspace at the
// session's first Exec, CopyIn or CopyOut (executor.Executor.Prepare:
// the runner prepares while it makes the checkout). It writes to
// spec.Log the pod's name, node, image, resources and user.
//
// Errors: a workflow asking for more resources than the runner allows,
// an image that cannot be pulled within ImagePullGrace (a *executor.Fault
// with reason image-pull and the kubelet's message), a pod unscheduled
// past PendingTimeout (unschedulable, with the scheduler's message), a
// pod the API server or the kubelet refuses (Pod Security, quota,
// CreateContainerConfigError: reason executor with their message), a
// node whose container runtime cannot make the pod's sandbox (no handler
// for the RuntimeClass: at once; other sandbox failures after a minute;
// reason executor with the kubelet's event), an agent that cannot be
// delivered. On error the pod is deleted.
func (d *driver) Make(ctx context.Context, spec executor.Spec, serve agent.Serve) (*agentenv.Env, error) {
	e := (*Executor)(d)
	if e.pool != nil {
		if wp, why := e.pool.take(spec); wp != nil {
			env, err := e.claimWarm(ctx, spec, serve, wp)
			if err == nil {
				return env, nil
			}
			e.log.Warn("a warm pod could not be taken; the run starts a pod of its own", "run", spec.ID, "pod", wp.name, "err", err)
			e.logf(spec, "the warm pod %s could not be taken (%v): starting a pod of this run's own", wp.name, err)
		} else {
			e.logf(spec, "no warm pod: %s", why)
		}
	}
	env, _, err := e.makePod(ctx, spec, serve, false)
	return env, err
}

// makePod makes a job pod for spec, delivers the agent and returns the
// pod as an environment (Make's work). A warm pod (warm true) carries no
// run: LabelWarm instead of the run's labels, and a long
// activeDeadlineSeconds that its claim shortens. Under --user-namespace
// auto, a pod whose node cannot make its user namespace is deleted and
// made again without one, and later pods of the RuntimeClass ask for
// none (wantsUserNamespace).
func (e *Executor) makePod(ctx context.Context, spec executor.Spec, serve agent.Serve, warm bool) (*agentenv.Env, *corev1.Pod, error) {
	userns, why := e.wantsUserNamespace()
	env, pod, err := e.makePodOnce(ctx, spec, serve, warm, userns, why)
	if userns && e.cfg.UserNamespace == UserNamespaceAuto && usernsRefused(pod, err) {
		var f *executor.Fault
		errors.As(err, &f)
		said, _, _ := strings.Cut(f.Message, fixSep)
		why = "a node's runtime refused one to a pod of this RuntimeClass: " + said
		e.usernsRefused.Store(e.cfg.RuntimeClass, why)
		e.log.Warn("job pods of this RuntimeClass get no user namespace from now on (--user-namespace auto)", "runtime_class", e.cfg.RuntimeClass, "err", f.Message)
		e.logf(spec, "user namespace: refused: %s; --user-namespace auto: the pod is made again without one", said)
		return e.makePodOnce(ctx, spec, serve, warm, false, why)
	}
	return env, pod, err
}

// makePodOnce makes one pod for makePod, asking for a user namespace when
// userns (why says why not, for the setup log): it builds the pod
// (jobPod), creates it and waits until it runs (startPod), then delivers
// the agent (podEnv). On error the pod it returns is non-nil only when
// the pod was made and did not run (then already deleted): what
// usernsRefused reads.
func (e *Executor) makePodOnce(ctx context.Context, spec executor.Spec, serve agent.Serve, warm, userns bool, why string) (*agentenv.Env, *corev1.Pod, error) {
	plan, err := e.jobPod(spec, serve, warm, userns)
	if err != nil {
		return nil, nil, err
	}
	pod, node, err := e.startPod(ctx, spec, plan)
	if err != nil {
		return nil, pod, err
	}
	env, err := e.podEnv(ctx, spec, pod, node, userns, why)
	if err != nil {
		_ = e.deletePod(context.WithoutCancel(ctx), pod.Name, pod.UID, false)
		return nil, nil, err
	}
	return env, pod, nil
}

// startPod creates plan's pod (createPod), says in spec's setup log what
// it is (logPod) and waits until its containers run (waitRunning); it
// returns the pod as created and the node it runs on. On error the pod
// is deleted, and the pod returned is plan's as asked for, with its
// name, when it was made and did not run (else nil).
func (e *Executor) startPod(ctx context.Context, spec executor.Spec, plan podPlan) (*corev1.Pod, string, error) {
	// The informer (started once per process: the first pod of an `exec`
	// waits for its list and watch) syncs while the pod is created.
	watched := make(chan error, 1)
	go func() { watched <- e.watch(ctx) }()
	pod, err := e.createPod(ctx, spec, plan.pod)
	if err != nil {
		<-watched
		return nil, "", err
	}
	created := time.Now()
	ok := false
	defer func() {
		if !ok {
			_ = e.deletePod(context.WithoutCancel(ctx), pod.Name, pod.UID, false)
		}
	}()
	if err := <-watched; err != nil {
		return nil, "", err
	}
	e.logPod(spec, pod.Name, plan)
	running, err := e.waitRunning(ctx, spec, pod.Name, created)
	if err != nil {
		if f := (*executor.Fault)(nil); errors.As(err, &f) && f.Reason == api.ReasonService {
			agentenv.WriteServiceLogs(context.WithoutCancel(ctx), spec, podServices{e: e, pod: pod.Name})
		}
		asked := plan.pod.DeepCopy()
		asked.Name = pod.Name
		return asked, "", err
	}
	e.logf(spec, "pod running on node %s after %s", running.Spec.NodeName, time.Since(created).Round(time.Millisecond))
	ok = true
	return pod, running.Spec.NodeName, nil
}

// logPod writes to spec's setup log what the job pod name is: its image,
// resources, user and hardening, its builder and its services.
func (e *Executor) logPod(spec executor.Spec, name string, plan podPlan) {
	user := "uid:gid " + e.cfg.RunAs.String()
	switch {
	case e.cfg.RunAs.Image && plan.userns:
		user = "the image's own user (root too: the pod asks for a user namespace)"
	case e.cfg.RunAs.Image:
		user = "the image's own user (non-root)"
	}
	if plan.userns {
		user += ", in a user namespace of its own (hostUsers: false)"
	}
	e.logf(spec, "pod %s/%s: image %s, cpu %s, memory %s, ephemeral storage %s (requests = limits), as %s, read-only root file system, no capabilities, no service account token",
		e.ns, name, plan.image, plan.cpu.String(), plan.mem.String(), plan.disk.String(), user)
	if b := plan.builder; b != nil {
		e.logf(spec, "builder: image %s, cpu %s, memory %s (the job's: its build steps run in it), BuildKit in a user namespace nested in the pod's, as the pod's root; capabilities SETUID, SETGID, SETFCAP of the pod's user namespace only, seccomp Localhost %s, /proc unmasked; namespace %s (Pod Security baseline); buildctl on the steps' PATH, its socket at %s/buildkitd.sock",
			b.Image, plan.cpu.String(), plan.mem.String(), b.SeccompProfile, e.ns, BuilderShare)
	}
	for _, s := range plan.services {
		e.logf(spec, "service %s: image %s, cpu %s, memory %s, ephemeral storage %s (requests = limits), a sidecar of the pod hardened as the job's container, reachable at 127.0.0.1",
			s.Name, s.Image, s.CPU.String(), s.Memory.String(), s.Disk.String())
	}
}

// podEnv delivers the step agent into pod, running on node (deliver), and
// returns the pod as an environment whose first connection is the
// delivery's exec: its Why says when the agent sent cannot execute there
// (agentArchFault), its Attached writes what was delivered and checks the
// user namespace (userNamespaceChecked; userns and why as for
// makePodOnce), its Ready copies spec's checkout in. It records on pod
// (in memory) the node and the architecture, which a warm pod's claim
// reads. Errors: the delivery's; the pod is the caller's to delete.
func (e *Executor) podEnv(ctx context.Context, spec executor.Spec, pod *corev1.Pod, node string, userns bool, why string) (*agentenv.Env, error) {
	t0 := time.Now()
	dl, err := e.deliver(ctx, pod.Name, node)
	if err != nil {
		return nil, err
	}
	env := e.env(pod.Name, pod.UID, dl.stream)
	if st, ok := dl.stream.(*stream); ok && dl.arch != "" {
		env.Environment = archChecked{Environment: env.Environment, stderr: &st.stderr, arch: dl.arch, node: node}
	}
	env.Data = handleData{Namespace: e.ns, Pod: pod.Name, UID: pod.UID, Workspace: spec.Workspace}
	// What a warm pod's claim needs to know of it.
	pod.Spec.NodeName = node
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annotationArch] = dl.arch
	hooks := agentenv.Hooks{Attached: func(_ context.Context, _ *agent.Client, hello agent.AgentHello) error {
		arch := "linux/" + dl.arch
		if dl.assumed != "" {
			arch += " (the image has no uname: assumed, " + dl.assumed + ")"
		}
		e.logf(spec, "step agent %s for %s delivered (%.1f MB) and connected in %s; a step's processes end with the step (%s)",
			hello.Agent, arch, float64(dl.size)/1e6, time.Since(t0).Round(time.Millisecond), hello.Kill)
		if f := e.userNamespaceChecked(spec, pod.Name, node, userns, why, hello); f != nil {
			return f
		}
		return nil
	}}
	if spec.Workspace != "" {
		hooks.Ready = e.copyCheckout(spec.Workspace)
	}
	env.AddHooks(hooks)
	return env, nil
}

// archChecked is a job pod's Environment whose Why says when the agent
// sent for arch cannot execute on node: its bridge (the delivery's exec)
// says so on STDERR, or the container's status names the agent's path
// with "exec format error" (a pod that reported another architecture
// than its node's).
type archChecked struct {
	agentenv.Environment
	stderr     *agentenv.StderrTail
	arch, node string
}

func (a archChecked) Why(ctx context.Context) *executor.Fault {
	f := a.Environment.Why(ctx)
	if strings.Contains(strings.ToLower(a.stderr.String()), "exec format error") ||
		f != nil && strings.Contains(f.Message, "exec format error") && strings.Contains(f.Message, AgentPath) {
		return agentArchFault(a.arch, a.node)
	}
	return f
}

// agentArchFault is the fault of a step agent for linux/arch that cannot
// execute on node (exec format error): the pod's image reported (uname
// -m) another architecture than the node's.
func agentArchFault(arch, node string) *executor.Fault {
	return &executor.Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf(
		"the step agent for linux/%s, the architecture the job pod reported (uname -m), cannot execute on node %s (exec format error): the image's uname and the node disagree, or the node runs an emulation; run such images on nodes of their architecture (--node-selector kubernetes.io/arch=..., or the workflow's arch:)",
		arch, node)}
}

// Open finds the pod a handle names for Recover: it must still exist with
// the recorded UID and run. When Config.Owner is set and the pod's owner
// reference names another UID (a new runner pod adopting the pods of the
// old one), the reference is re-pointed, so that the garbage collector
// does not delete the pod with the old owner. The checkout is copied
// again, from the host, unless the pod has the mark that it arrived
// whole. A pod gone or ended is not recoverable, with an
// *executor.Fault saying why (pod-lost, evicted, oom-killed, timeout).
func (d *driver) Open(ctx context.Context, id string, data json.RawMessage) (*agentenv.Env, error) {
	e := (*Executor)(d)
	var h handleData
	if err := json.Unmarshal(data, &h); err != nil || h.Pod == "" {
		return nil, fmt.Errorf("unreadable handle: %w", executor.ErrNotRecoverable)
	}
	if h.Namespace != e.ns {
		return nil, fmt.Errorf("the pod is in namespace %s, this runner works in %s: %w", h.Namespace, e.ns, executor.ErrNotRecoverable)
	}
	if err := e.watch(ctx); err != nil {
		return nil, err
	}
	var p *corev1.Pod
	err := throttled(ctx, func() error {
		var err error
		p, err = e.client.CoreV1().Pods(e.ns).Get(ctx, h.Pod, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		f := &executor.Fault{Reason: ReasonPodLost, Message: fmt.Sprintf("the job pod %s is gone", h.Pod)}
		return nil, fmt.Errorf("%w: %w", f, executor.ErrNotRecoverable)
	}
	if err != nil {
		return nil, err
	}
	if p.UID != h.UID {
		return nil, fmt.Errorf("the pod %s is another pod now (uid %s, was %s): %w", h.Pod, p.UID, h.UID, executor.ErrNotRecoverable)
	}
	if !running(p) || p.DeletionTimestamp != nil {
		f := &executor.Fault{Reason: ReasonPodLost, Message: fmt.Sprintf("the job pod %s: it does not run", h.Pod)}
		if pf := podFault(p, time.Now(), time.Now(), 0, 0); pf != nil {
			f.Reason, f.Message = pf.Reason, fmt.Sprintf("the job pod %s: %s", h.Pod, pf.Message)
		}
		return nil, fmt.Errorf("%w: %w", f, executor.ErrNotRecoverable)
	}
	e.adopt(ctx, p)
	env := e.env(p.Name, p.UID, nil)
	env.Data = h
	copyIn := false // the checkout is copied again: Attached found no mark
	env.AddHooks(agentenv.Hooks{
		Attached: func(ctx context.Context, c *agent.Client, _ agent.AgentHello) error {
			if e.hasMark(ctx, c) {
				return nil
			}
			if fi, err := os.Stat(h.Workspace); h.Workspace == "" || err != nil || !fi.IsDir() {
				return fmt.Errorf("the pod %s never got the whole checkout, and it is not on this host: %w", p.Name, executor.ErrNotRecoverable)
			}
			copyIn = true
			return nil
		},
		Ready: func(ctx context.Context, s *agentenv.Session) error {
			if !copyIn {
				return nil
			}
			return e.copyCheckout(h.Workspace)(ctx, s)
		},
	})
	return env, nil
}

// List returns this runner's job pods (by their labels).
func (d *driver) List(ctx context.Context) ([]agentenv.Listed, error) {
	e := (*Executor)(d)
	var list *corev1.PodList
	err := throttled(ctx, func() error {
		var err error
		list, err = e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: e.selector().String()})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]agentenv.Listed, 0, len(list.Items))
	for _, p := range list.Items {
		name, uid := p.Name, p.UID
		out = append(out, agentenv.Listed{ID: p.Labels[agentenv.LabelRun], Name: "pod " + name,
			Remove: func(ctx context.Context) error { return e.deletePod(ctx, name, uid, false) }})
	}
	return out, nil
}

// env is job pod name as an environment (podEnvironment): first (when
// not nil) is its first connection. A step its pod stopped without
// saying why ends pod-lost.
func (e *Executor) env(name string, uid types.UID, first io.ReadWriteCloser) *agentenv.Env {
	return &agentenv.Env{
		Environment: &podEnvironment{e: e, name: name, uid: uid, first: first,
			connect: append([]string{AgentPath}, agent.Connect{Socket: AgentSocket, Wait: 10 * time.Second}.Args()...)},
		Name:       "pod " + e.ns + "/" + name,
		LostReason: ReasonPodLost,
		Services:   podServices{e: e, pod: name},
		AgentPath:  AgentPath,
		Compress:   true,
	}
}

// podEnvironment is job pod name (of uid) as an agentenv.Environment:
// each dial but the first (first, when not nil) is a new exec of
// `knotless-agent connect` (connect); a pod that is gone, or whose
// container ended, makes a dial fail with agent.ErrGone; Why reads the
// pod's own reason (why); Remove deletes it (deletePod).
type podEnvironment struct {
	e       *Executor
	name    string
	uid     types.UID
	connect []string

	mu    sync.Mutex
	first io.ReadWriteCloser
}

func (p *podEnvironment) Dial(ctx context.Context) (io.ReadWriteCloser, error) {
	p.mu.Lock()
	c := p.first
	p.first = nil
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	e := p.e
	if pod, _ := e.pod(p.name); pod == nil || !running(pod) {
		// The cache may lag: ask the API server before giving up.
		got, err := e.client.CoreV1().Pods(e.ns).Get(ctx, p.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: the job pod %s is gone", agent.ErrGone, p.name)
		}
		if err == nil && !running(got) {
			if f := podFault(got, time.Now(), time.Now(), 0, 0); f != nil {
				return nil, fmt.Errorf("%w: %s", agent.ErrGone, f.Message)
			}
		}
	}
	return e.openStream(p.name, p.connect)
}

func (p *podEnvironment) Why(ctx context.Context) *executor.Fault { return p.e.why(ctx, p.name) }

func (p *podEnvironment) Remove(ctx context.Context, agentEnded bool) error {
	return p.e.deletePod(ctx, p.name, p.uid, agentEnded)
}

// why reads what became of the pod: nil while its container runs and it
// is not being deleted (or when the API server cannot be asked), else the
// pod's own reason (oom-killed, evicted, timeout, pod-lost).
func (e *Executor) why(ctx context.Context, name string) *executor.Fault {
	p, _ := e.pod(name)
	if p == nil || running(p) {
		got, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			p = nil
		case err == nil:
			p = got
		default:
			return nil
		}
	}
	if p != nil && running(p) && p.DeletionTimestamp == nil {
		return serviceFault(p, time.Now(), time.Now(), time.Hour)
	}
	if p != nil && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		if cs := jobStatus(p); cs != nil && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 && execFormatFault(cs) == nil {
			// The agent exited as asked by a SIGTERM, and the kubelet has
			// not yet said why it sent one: its eviction's words come
			// with the pod's final phase, a moment later.
			return nil
		}
	}
	f := podFault(p, time.Now(), time.Now(), 0, 0)
	if f == nil {
		f = &executor.Fault{Reason: ReasonPodLost, Message: fmt.Sprintf("the job pod %s does not run (phase %s)", name, p.Status.Phase)}
	}
	if f.Reason == ReasonPodLost || builderEnded(p) {
		// A pod deleted before its status said why (or whose builder the
		// kubelet's eviction stopped first, its status a moment behind):
		// the kubelet's and the scheduler's events still may (Evicted,
		// Preempted).
		if ef := e.eventFault(ctx, name); ef != nil {
			return ef
		}
	}
	return f
}

// eventFault reads the pod's events for why it ended (the kubelet's
// Evicted, with what it measured; the scheduler's Preempted): nil when
// none says, or the events cannot be listed (the Role's events list).
func (e *Executor) eventFault(ctx context.Context, pod string) *executor.Fault {
	list, err := e.client.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	if err != nil {
		return nil
	}
	for _, ev := range list.Items {
		switch ev.Reason {
		case "Evicted":
			return &executor.Fault{Reason: api.ReasonEvicted, Message: "the job pod was evicted by the kubelet: " + strings.TrimSpace(ev.Message)}
		case "Preempted", "Preempting":
			return disruptionFault(ev.Reason, ev.Message)
		}
	}
	return nil
}

// workspaceMark is the file that says the checkout was copied in whole.
const workspaceMark = AgentDir + "/workspace-copied"

// copyCheckout is the Ready hook that copies the checkout at workspace
// into the pod and then the mark that it arrived whole.
func (e *Executor) copyCheckout(workspace string) func(context.Context, *agentenv.Session) error {
	return func(ctx context.Context, s *agentenv.Session) error {
		if err := s.CopyInNow(ctx, workspace, "."); err != nil {
			return fmt.Errorf("copy the checkout into the pod: %w", err)
		}
		empty := e.emptyFile()
		if empty == "" {
			return nil
		}
		defer os.Remove(empty)
		return s.CopyInNow(ctx, empty, workspaceMark)
	}
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
	err := throttled(ctx, func() error { return e.client.CoreV1().Pods(e.ns).Delete(ctx, name, opts) })
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

// PodOf is the name of the job pod of a session of this executor ("" for
// another executor's).
func PodOf(s executor.Session) string {
	var h handleData
	if s.Handle().Executor != Name || json.Unmarshal(s.Handle().Data, &h) != nil {
		return ""
	}
	return h.Pod
}

// Node labels job pods select (well-known labels of every node).
const (
	LabelOS   = "kubernetes.io/os"
	LabelArch = "kubernetes.io/arch"
)

// nodeSelector is the job pod's nodeSelector: Config.NodeSelector, plus
// kubernetes.io/os linux (a step agent is a Linux program; a Windows node
// must never get the pod) and, when the workflow asks for one
// (`arch:`), kubernetes.io/arch. A workflow asking for another
// architecture than the runner's --node-selector pins is refused, naming
// both.
func (e *Executor) nodeSelector(spec executor.Spec) (map[string]string, error) {
	sel := map[string]string{LabelOS: "linux"}
	for k, v := range e.cfg.NodeSelector {
		sel[k] = v
	}
	if spec.Arch != "" {
		if pinned, ok := e.cfg.NodeSelector[LabelArch]; ok && pinned != spec.Arch {
			return nil, &executor.Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf(
				"the workflow asks for arch: %s, and this runner puts job pods on %s=%s nodes only (--node-selector): give the workflow runners: labels of a runner for %s nodes",
				spec.Arch, LabelArch, pinned, spec.Arch)}
		}
		sel[LabelArch] = spec.Arch
	}
	return sel, nil
}

// Back-off of a job pod's creation that a ResourceQuota or a LimitRange
// refuses.
const (
	quotaRetryFirst = time.Second
	quotaRetryMax   = 15 * time.Second
)

// createPod creates the job pod. A refusal by the namespace's
// ResourceQuota (exceeded quota) or LimitRange is a normal, passing state
// of a shared namespace: the run waits, saying why in its setup log, and
// retries with back-off (1 s doubling to 15 s) until PendingTimeout after
// its first try, then ends errored naming the quota. Canceling ctx while
// it waits makes nothing. Other refusals (Pod Security, an invalid pod)
// end the run at once.
func (e *Executor) createPod(ctx context.Context, spec executor.Spec, pod *corev1.Pod) (*corev1.Pod, error) {
	start := time.Now()
	wait, said := quotaRetryFirst, ""
	for {
		var created *corev1.Pod
		err := throttled(ctx, func() error {
			var err error
			created, err = e.client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		})
		if err == nil {
			if said != "" {
				e.logf(spec, "the namespace's quota has room again: the job pod was created after %s", time.Since(start).Round(time.Second))
			}
			return created, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		msg := err.Error()
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			return nil, fmt.Errorf("create the job pod: %w", err)
		}
		if !quotaRefusal(msg) {
			return nil, &executor.Fault{Reason: api.ReasonExecutor, Message: "the API server refused the job pod: " + msg}
		}
		if time.Since(start)+wait > e.cfg.PendingTimeout {
			return nil, &executor.Fault{Reason: api.ReasonUnschedulable, Message: fmt.Sprintf(
				"the namespace %s refused the job pod for %s (--pending-timeout): %s", e.ns, time.Since(start).Round(time.Second), msg)}
		}
		if msg != said {
			said = msg
			e.logf(spec, "waiting: the namespace %s has no room for the job pod (%s); retrying until --pending-timeout %s", e.ns, msg, e.cfg.PendingTimeout)
			e.log.Info("a run waits for the namespace's quota", "run", spec.ID, "err", msg)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait = min(2*wait, quotaRetryMax)
	}
}

// quotaRefusal reports whether an API server's refusal of a pod is a
// ResourceQuota's or a LimitRange's (admission messages "exceeded quota",
// "must specify", "maximum ... usage per", "minimum ... usage per").
func quotaRefusal(msg string) bool {
	for _, s := range []string{"exceeded quota", "maximum cpu usage", "maximum memory usage", "maximum ephemeral-storage usage",
		"minimum cpu usage", "minimum memory usage", "minimum ephemeral-storage usage", "LimitRange"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// throttleWait bounds how long a request the API server keeps refusing as
// too many (429: API Priority and Fairness, or a max-in-flight limit) is
// retried, beyond client-go's own retries.
const throttleWait = 5 * time.Minute

// throttled runs call, and again while the API server answers it 429 Too
// Many Requests, waiting as long as it suggests (Retry-After; 1 s when it
// says nothing, growing to 10 s) for up to throttleWait or ctx's end. A
// runner with many runs in a throttled namespace must not fail a run for
// the API server's fairness. Other errors return at once.
func throttled(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(throttleWait)
	wait := time.Second
	for {
		err := call()
		if !apierrors.IsTooManyRequests(err) || time.Now().After(deadline) {
			return err
		}
		d := wait
		if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
			d = time.Duration(s) * time.Second
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return err
		}
		wait = min(2*wait, 10*time.Second)
	}
}
