package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/version"
)

// LabelWarm marks a warm pod: a job pod started before any run claimed
// it. It carries no run label of a run, no repository data and no secret
// until a claim takes it (the label is then removed).
const LabelWarm = "knotless.dev/warm"

// Defaults of the warm pool.
const (
	// DefaultWarmMaxAge is how long a warm pod waits for a claim before
	// it is replaced (its image may have moved on, its node drained).
	DefaultWarmMaxAge = 30 * time.Minute
	// warmDeadline is a warm pod's activeDeadlineSeconds before a claim
	// shortens it to the run's: long enough for its age and any run.
	warmDeadline = 48 * time.Hour
	// warmRetry is how long the pool waits after a warm pod could not be
	// made before it tries again.
	warmRetry = 30 * time.Second
)

// annotationArch carries, on the in-memory pod makePod returns (never on
// the cluster's object), the architecture its agent was delivered for.
const annotationArch = "knotless.dev/agent-arch"

// warmPod is one pod of the pool: started, its agent delivered and a
// client connected to it (heartbeats keep the stream alive).
type warmPod struct {
	id     string // its agent's run until a claim adopts it
	name   string
	uid    types.UID
	node   string
	arch   string
	env    *agentenv.Env
	client *agent.Client
	run    *atomic.Pointer[string] // the run that adopted it, for the client's hello check
	made   time.Time
	userns bool // it asked for a user namespace
}

// warmPool keeps up to Config.WarmPods warm pods for runs that ask for the
// runner's defaults (its image and resources), within what
// Config.Capacity allows beside the runs in progress. A claim takes one
// (claimWarm): it serves exactly that run, and the pool makes another.
// Pods gone, ended or older than Config.WarmMaxAge are replaced. Safe for
// concurrent use.
type warmPool struct {
	e    *Executor
	stop chan struct{}
	wake chan struct{}

	mu     sync.Mutex
	pods   []*warmPod
	making int
	taken  int // pods taken since the start, for doctor and logs
}

// newWarmPool returns the pool of e; start makes it fill.
func newWarmPool(e *Executor) *warmPool {
	return &warmPool{e: e, stop: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// start fills the pool in the background until close.
func (p *warmPool) start() { go p.loop() }

// poke wakes the pool to look again.
func (p *warmPool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// want is how many more warm pods the pool should make now.
func (p *warmPool) want() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	target := p.e.cfg.WarmPods
	if c := p.e.cfg.Capacity; c > 0 {
		target = min(target, c-p.e.Base.Held())
	}
	return target - len(p.pods) - p.making
}

func (p *warmPool) loop() {
	for {
		p.prune()
		for p.want() > 0 {
			if !p.fill() {
				select {
				case <-time.After(warmRetry):
				case <-p.stop:
					return
				}
			}
		}
		var changed <-chan struct{}
		if p.e.lister != nil {
			_, changed = p.e.pod("")
		}
		select {
		case <-p.stop:
			return
		case <-p.wake:
		case <-changed:
		case <-time.After(10 * time.Second):
		}
	}
}

// fill makes one warm pod; false when it could not.
func (p *warmPool) fill() bool {
	p.mu.Lock()
	p.making++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.making--
		p.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), p.e.cfg.PendingTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	wp, err := p.e.makeWarm(ctx)
	if err != nil {
		p.e.log.Warn("a warm pod could not be made; runs start pods of their own meanwhile", "err", err, "retry_in", warmRetry)
		return false
	}
	p.mu.Lock()
	select {
	case <-p.stop:
		p.mu.Unlock()
		p.e.dropWarm(wp, "the pool is closed")
		return false
	default:
	}
	p.pods = append(p.pods, wp)
	ready := len(p.pods)
	p.mu.Unlock()
	p.e.log.Info("warm pod ready", "pod", wp.name, "node", wp.node, "ready", ready, "of", p.e.cfg.WarmPods)
	return true
}

// prune replaces pods that are gone, ended, being deleted or too old.
func (p *warmPool) prune() {
	p.mu.Lock()
	var keep, drop []*warmPod
	var why []string
	for _, wp := range p.pods {
		pod, _ := p.e.pod(wp.name)
		switch {
		case pod == nil || pod.UID != wp.uid:
			drop, why = append(drop, wp), append(why, "deleted from outside the runner")
		case !running(pod) || pod.DeletionTimestamp != nil:
			drop, why = append(drop, wp), append(why, "no longer running")
		case time.Since(wp.made) > p.e.cfg.WarmMaxAge:
			drop, why = append(drop, wp), append(why, "older than --warm-max-age")
		default:
			keep = append(keep, wp)
		}
	}
	p.pods = keep
	p.mu.Unlock()
	for i, wp := range drop {
		p.e.dropWarm(wp, why[i])
	}
}

// take removes and returns a warm pod that can serve spec (the runner's
// image and resources, the pod's architecture), or nil and why none.
func (p *warmPool) take(spec executor.Spec) (*warmPod, string) {
	if spec.Image != "" && spec.Image != p.e.cfg.Image {
		return nil, fmt.Sprintf("the workflow's image %s is not the runner's default %s, which the warm pods run", spec.Image, p.e.cfg.Image)
	}
	if len(spec.Services) > 0 {
		return nil, "the workflow has services, which are containers of the run's own pod"
	}
	if spec.CPUs != "" || spec.MemoryBytes != 0 || spec.DiskBytes != 0 {
		want, err := p.e.caps.Resolve(spec)
		if def, _ := p.e.caps.Resolve(executor.Spec{}); err != nil || want != def {
			return nil, "the workflow asks for other resources than the runner's defaults, which the warm pods have"
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, wp := range p.pods {
		if spec.Arch != "" && spec.Arch != wp.arch {
			continue
		}
		if pod, _ := p.e.pod(wp.name); pod == nil || !running(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		p.pods = append(p.pods[:i:i], p.pods[i+1:]...)
		p.taken++
		p.poke()
		return wp, ""
	}
	if len(p.pods) == 0 {
		return nil, fmt.Sprintf("none is ready (--warm-pods %d; %d being made)", p.e.cfg.WarmPods, p.making)
	}
	return nil, "none runs on a node of the workflow's arch: " + spec.Arch
}

// ids are the run IDs of the pool's pods (their agents' warm IDs), which
// Sweep keeps.
func (p *warmPool) ids() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.pods))
	for _, wp := range p.pods {
		out = append(out, wp.id)
	}
	return out
}

// status is how many warm pods are ready and being made.
func (p *warmPool) status() (ready, making, taken int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pods), p.making, p.taken
}

// close stops the pool and deletes its pods (they hold no run).
func (p *warmPool) close() {
	p.mu.Lock()
	select {
	case <-p.stop:
		p.mu.Unlock()
		return
	default:
		close(p.stop)
	}
	pods := p.pods
	p.pods = nil
	p.mu.Unlock()
	for _, wp := range pods {
		p.e.dropWarm(wp, "the runner stops")
	}
}

// makeWarm makes one warm pod: the runner's default image and resources,
// its agent delivered and connected, no run.
func (e *Executor) makeWarm(ctx context.Context) (*warmPod, error) {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	id := "warm-" + hex.EncodeToString(b)
	serve := agent.Serve{Run: id, Heartbeat: e.cfg.Heartbeat, DeadAfter: e.cfg.DeadAfter}
	// The pod's progress (waiting for a node, for an image) goes to the
	// runner's log: no run's setup log is there to say it.
	env, pod, err := e.makePod(ctx, executor.Spec{ID: id, Log: logLines{e.log.With("warm", id)}}, serve, true)
	if err != nil {
		return nil, err
	}
	wp := &warmPod{id: id, name: pod.Name, uid: pod.UID, node: pod.Spec.NodeName, arch: pod.Annotations[annotationArch],
		env: env, run: new(atomic.Pointer[string]), made: time.Now(), userns: asksUserNamespace(pod)}
	wp.client = agent.NewClient(env.Dial, agent.Options{
		Name: "knotless-run " + version.Version, Heartbeat: e.cfg.Heartbeat, DeadAfter: e.cfg.DeadAfter,
		Logger: e.log.With("pod", pod.Name),
		OnHello: func(h agent.AgentHello) error {
			if r := wp.run.Load(); h.Run == id || r != nil && h.Run == *r {
				return nil
			}
			return fmt.Errorf("the agent in pod %s serves run %q, not %q", pod.Name, h.Run, id)
		},
	})
	if _, err := wp.client.Connect(ctx); err != nil {
		e.dropWarm(wp, "its agent could not be reached")
		return nil, fmt.Errorf("connect to the agent of warm pod %s: %w", pod.Name, err)
	}
	return wp, nil
}

// dropWarm closes a warm pod's client and deletes the pod.
func (e *Executor) dropWarm(wp *warmPod, why string) {
	if wp.client != nil {
		_ = wp.client.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.deletePod(ctx, wp.name, wp.uid, false); err != nil {
		e.log.Warn("could not delete a warm pod", "pod", wp.name, "err", err)
	}
	e.log.Info("warm pod removed", "pod", wp.name, "why", why)
}

// claimWarm gives warm pod wp to spec's run: the pod's labels become the
// run's (LabelWarm removed), its activeDeadlineSeconds the run's timeout
// from now, and its agent adopts the run (agent.Adopt) once Base has
// attached; the checkout is copied in before the first step, as on a pod
// of the run's own. The setup log says the run took a warm pod.
func (e *Executor) claimWarm(ctx context.Context, spec executor.Spec, serve agent.Serve, wp *warmPod) (*agentenv.Env, error) {
	pod, _ := e.pod(wp.name)
	if pod == nil || pod.UID != wp.uid {
		e.dropWarm(wp, "gone before its claim")
		return nil, fmt.Errorf("the warm pod %s is gone", wp.name)
	}
	labels := map[string]any{LabelWarm: nil, agentenv.LabelRun: labelValue(spec.ID)}
	for k, v := range spec.Labels {
		if _, own := labels[k]; !own && validLabelKey.MatchString(k) && k != agentenv.LabelManagedBy && k != agentenv.LabelRunner {
			labels[k] = labelValue(v)
		}
	}
	patch := map[string]any{"metadata": map[string]any{"labels": labels}}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = time.Hour
	}
	started := wp.made
	if pod.Status.StartTime != nil {
		started = pod.Status.StartTime.Time
	}
	if d := int64((time.Since(started) + timeout + deadlineMargin + time.Second - 1) / time.Second); pod.Spec.ActiveDeadlineSeconds == nil || d < *pod.Spec.ActiveDeadlineSeconds {
		patch["spec"] = map[string]any{"activeDeadlineSeconds": d}
	}
	body, _ := json.Marshal(patch)
	if err := throttled(ctx, func() error {
		_, err := e.client.CoreV1().Pods(e.ns).Patch(ctx, wp.name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}); err != nil {
		e.dropWarm(wp, "its claim could not label it")
		return nil, fmt.Errorf("label the warm pod %s for run %s: %w", wp.name, spec.ID, err)
	}
	run := spec.ID
	wp.run.Store(&run)
	env := wp.env
	env.Client, env.AdoptFrom = wp.client, wp.id
	env.Data = handleData{Namespace: e.ns, Pod: wp.name, UID: wp.uid, Workspace: spec.Workspace}
	// The warm pod's hooks were of no run: the run's replace them.
	env.Hooks = agentenv.Hooks{Attached: func(ctx context.Context, c *agent.Client, hello agent.AgentHello) error {
		if hello.Run != spec.ID {
			if err := c.Adopt(ctx, spec.ID, serve.Deadline); err != nil {
				return err
			}
		}
		e.logf(spec, "took the warm pod %s/%s (ready for %s on node %s, step agent %s for linux/%s): no pod start for this run; a step's processes end with the step (%s)",
			e.ns, wp.name, time.Since(wp.made).Round(time.Second), wp.node, hello.Agent, wp.arch, hello.Kill)
		_, why := e.wantsUserNamespace()
		if f := e.userNamespaceChecked(spec, wp.name, wp.node, wp.userns, why, hello); f != nil {
			return f
		}
		e.log.Info("warm pod taken", "run", spec.ID, "pod", wp.name)
		return nil
	}}
	if spec.Workspace != "" {
		env.Hooks.Ready = e.copyCheckout(spec.Workspace)
	}
	return env, nil
}

// Sweep removes every environment of this runner no run holds (Base's:
// up to agentenv.SweepAtOnce pods at once, the client's --kube-api-qps
// bounding the rate), keeping the warm pool's pods, in the job pods' and
// the builds namespace at once, and then, unless ephemeral, starts the
// warm pool: the runner calls it once at its start. Errors of both
// namespaces are joined.
func (e *Executor) Sweep(ctx context.Context, keep []string) error {
	if e.pool != nil {
		keep = append(keep, e.pool.ids()...)
	}
	var builds error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); builds = e.sweepBuilds(ctx, keep) }()
	err := e.Base.Sweep(ctx, keep)
	wg.Wait()
	err = errors.Join(err, builds)
	if e.pool != nil {
		e.poolOnce.Do(e.pool.start)
	}
	return err
}

// WarmPool reports the warm pool: pods ready for a claim, being made,
// and taken by runs since the executor started; all 0 without one.
func (e *Executor) WarmPool() (ready, making, taken int) {
	if e.pool == nil {
		return 0, 0, 0
	}
	return e.pool.status()
}

// logLines writes each line it gets as an Info line of log.
type logLines struct{ log *slog.Logger }

func (l logLines) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.log.Info(strings.TrimPrefix(line, "kube executor: "))
	}
	return len(p), nil
}
