package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/test/kwok"
)

// harness is the benchmark's own client of the control plane (user admin:
// the audit log tells its requests from the runners').
type harness struct {
	cs *kubernetes.Clientset
	cp *kwok.ControlPlane // its processes' exits end the waits at once
}

func newHarness(ctx context.Context, cp *kwok.ControlPlane) (*harness, error) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: cp.Server, BearerToken: kwok.Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 500, Burst: 1000})
	if err != nil {
		return nil, err
	}
	h := &harness{cs: cs, cp: cp}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kwok.Namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	// No kube-controller-manager makes it; the ServiceAccount admission
	// plugin wants it.
	if _, err := cs.CoreV1().ServiceAccounts(kwok.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create service account: %w", err)
	}
	return h, nil
}

// nodes creates n fake nodes (20 at a time) and waits until kwok made
// them all Ready.
func (h *harness) nodes(ctx context.Context, n int) error {
	sem := make(chan struct{}, 20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := h.createNode(ctx, i); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return h.waitReady(ctx, n, 10*time.Minute)
}

// waitReady waits until n nodes are Ready.
func (h *harness) waitReady(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		list, err := h.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, nd := range list.Items {
				for _, c := range nd.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
		}
		if ready >= n {
			return nil
		}
		if err := h.cp.Exited(); err != nil {
			return fmt.Errorf("waiting for nodes Ready (%d of %d): %w", ready, n, err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("timed out waiting for nodes Ready: %d of %d (%v)", ready, n, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// createNode creates fake node i: 32 CPUs, 128 GiB, 110 pods (a common
// cloud machine and the kubelet's default pod limit).
func (h *harness) createNode(ctx context.Context, i int) error {
	rl := corev1.ResourceList{}
	for k, v := range map[corev1.ResourceName]string{"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"} {
		rl[k] = mustQuantity(v)
	}
	name := fmt.Sprintf("kwok-node-%d", i)
	nd := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{kwok.NodeAnnotation: "fake"},
			Labels: map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
		Status: corev1.NodeStatus{Allocatable: rl, Capacity: rl},
	}
	_, err := h.cs.CoreV1().Nodes().Create(ctx, nd, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return nil
}

// runsPhase triggers the runs, waits until each is final and measures.
func runsPhase(ctx context.Context, o options, cp *kwok.ControlPlane, w *world, host *kwok.PodHost, r *Report) error {
	time.Sleep(2 * time.Second) // the runners' first long poll; not part of any figure
	t0 := time.Now()
	var runs []api.Run
	pipelines, started := map[int64]bool{}, map[int64]*time.Time{}
	for len(runs) < r.Runs {
		rs, err := w.trigger(ctx)
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			return fmt.Errorf("a trigger made no run")
		}
		pipelines[rs[0].Pipeline] = true
		runs = append(runs, rs...)
	}
	progress("triggered %d runs in %d pipelines in %.1f s", len(runs), len(pipelines), time.Since(t0).Seconds())
	deadline, lastProgress := time.Now().Add(o.timeout), time.Now()
	for len(pipelines) > 0 {
		for id := range pipelines {
			rs, err := w.pipelineRuns(ctx, id, o.matrix)
			if err != nil {
				return err
			}
			done := 0
			for _, run := range rs {
				if api.IsFinal(run.State) {
					done++
				}
			}
			if done == len(rs) && len(rs) == o.matrix {
				delete(pipelines, id)
				r.Final += done
				for _, run := range rs {
					if run.State == api.StateSucceeded {
						r.Succeeded++
					}
					started[run.ID] = run.StartedAt
				}
			}
		}
		exited := cp.Exited()
		if exited != nil || time.Now().After(deadline) || ctx.Err() != nil {
			// The figures of the runs that ended, then the error.
			measureRuns(runs, host, r, filepath.Join(w.dir, "server"), started)
			_ = measureRequests(cp, t0, r.Final, r)
			return fmt.Errorf("runs not final: %d pipelines left, %d runs final (figures above are over those): %w", len(pipelines), r.Final, cmp.Or(exited, ctx.Err(), errors.New("the -timeout passed")))
		}
		if time.Since(lastProgress) > 10*time.Second {
			progress("%d of %d runs final, %d pods started", r.Final, len(runs), host.Started())
			lastProgress = time.Now()
		}
		time.Sleep(5 * time.Second) // asking more often loads the server the runs need
	}
	r.RunsSeconds = time.Since(t0).Seconds()
	measureRuns(runs, host, r, filepath.Join(w.dir, "server"), started)
	time.Sleep(2 * time.Second) // the audit log's batch
	if err := measureRequests(cp, t0, len(runs), r); err != nil {
		return err
	}
	if r.Succeeded != len(runs) {
		return fmt.Errorf("%d of %d runs succeeded", r.Succeeded, len(runs))
	}
	return nil
}

// measureRequests reads the runners' requests since t0 from the audit
// log: per run (of runs) and the pod creates' rate.
func measureRequests(cp *kwok.ControlPlane, t0 time.Time, runs int, r *Report) error {
	counts, creates, err := requests(cp.AuditLog, kwok.RunnerUser, t0, time.Now())
	if err != nil {
		return err
	}
	r.RequestsPerRun = float64(total(counts)) / float64(max(runs, 1))
	r.ByVerb = perRun(counts, max(runs, 1))
	r.PodsPerSecond, r.PeakPodsPerSecond = createRate(creates)
	return nil
}

// measureRuns matches each run to its pod (label knotless.dev/run holds
// the run's id) and takes queued -> Running.
func measureRuns(runs []api.Run, host *kwok.PodHost, r *Report, data string, started map[int64]*time.Time) {
	ids := make([]int64, len(runs))
	for i, run := range runs {
		ids[i] = run.ID
	}
	dl := deliveries(data, ids)
	r.DeliveryP50 = float64(percentile(dl, 50).Microseconds()) / 1000
	r.DeliveryP99 = float64(percentile(dl, 99).Microseconds()) / 1000
	byRun := map[string]time.Time{}
	for _, t := range host.Times() {
		if !t.Running.IsZero() {
			byRun[t.Labels["knotless.dev/run"]] = t.Running
		}
	}
	var ds, cs []time.Duration
	for _, run := range runs {
		id := fmt.Sprint(run.ID)
		for _, k := range []string{id, "run-" + id} {
			if t, ok := byRun[k]; ok {
				ds = append(ds, t.Sub(run.CreatedAt))
				if st := started[run.ID]; st != nil {
					cs = append(cs, t.Sub(*st))
				}
				break
			}
		}
	}
	r.Matched = len(ds)
	r.ClaimedToRunningP50 = float64(percentile(cs, 50).Microseconds()) / 1000
	r.ClaimedToRunningP99 = float64(percentile(cs, 99).Microseconds()) / 1000
	r.QueuedToRunningP50 = float64(percentile(ds, 50).Microseconds()) / 1000
	r.QueuedToRunningP99 = float64(percentile(ds, 99).Microseconds()) / 1000
	r.CreatedToRunningP50, r.CreatedToRunningP99 = createdToRunning(host, func(l map[string]string) bool { return l["knotless.dev/run"] != "" })
}
