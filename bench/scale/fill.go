package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/test/kwok"
)

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// fillPhase creates o.fill pods with runner 0's labels for runs it does not
// hold (kwok makes them Running; PodHost runs nothing in them), takes
// runner 0's RSS once its informer holds them, deletes all but o.orphans,
// SIGKILLs runner 0, restarts it and times its sweep of the rest.
func fillPhase(ctx context.Context, o options, cp *kwok.ControlPlane, w *world, h *harness, r *Report) error {
	pid := w.runners["scale-0"].Process.Pid
	r.RSSIdleKB = rssKB(pid)
	progress("runner scale-0 RSS %d KiB; creating %d pods of its label", r.RSSIdleKB, o.fill)
	if err := h.fill(ctx, o.fill, o.orphans); err != nil {
		return err
	}
	// The informer's watch delivers them within a second or two; take the
	// largest of 10 samples a second apart.
	for range 10 {
		time.Sleep(time.Second)
		r.RSSFilledKB = max(r.RSSFilledKB, rssKB(pid))
	}
	n, err := h.count(ctx, "")
	if err != nil {
		return err
	}
	progress("runner scale-0 RSS %d KiB with %d pods of its label (%d left: it sweeps only at start)", r.RSSFilledKB, o.fill, n)
	if o.orphans == 0 {
		return nil
	}
	if err := h.cs.CoreV1().Pods(kwok.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: kwok.FillerLabel + "=drop"}); err != nil {
		return fmt.Errorf("delete filler pods: %w", err)
	}
	if err := waitCount(ctx, h, kwok.FillerLabel, o.orphans); err != nil {
		return err
	}
	w.killRunner("scale-0")
	time.Sleep(time.Second)
	t0 := time.Now()
	if err := w.startRunner("scale-0"); err != nil {
		return err
	}
	if err := waitCount(ctx, h, kwok.FillerLabel, 0); err != nil {
		return err
	}
	r.SweepSeconds = time.Since(t0).Seconds()
	time.Sleep(2 * time.Second) // the audit log's batch
	counts, _, err := requests(cp.AuditLog, kwok.RunnerUser, t0, time.Now())
	if err != nil {
		return err
	}
	r.SweepRequests, r.SweepByVerb = total(counts), perRun(counts, 1)
	return nil
}

// fill creates n filler pods labelled as runner scale-0's job pods of
// runs orphan-I, the first keep labelled FillerLabel=keep, the others
// FillerLabel=drop.
func (h *harness) fill(ctx context.Context, n, keep int) error {
	return h.fillWith(ctx, n, func(i int) (string, map[string]string) {
		v := "drop"
		if i < keep {
			v = "keep"
		}
		return fmt.Sprintf("knotless-run-orphan-%d", i), map[string]string{
			"app.kubernetes.io/managed-by": "knotless", "knotless.dev/runner": "scale-0",
			"knotless.dev/run": fmt.Sprintf("orphan-%d", i), kwok.FillerLabel: v}
	})
}

// fillWith creates n pods (50 at a time), pod I named and labelled as
// meta(I) says, each a container that only sleeps, bound by the scheduler
// to a fake node. With kwok.FillerLabel among its labels PodHost runs
// nothing in it.
func (h *harness) fillWith(ctx context.Context, n int, meta func(i int) (string, map[string]string)) error {
	sem := make(chan struct{}, 50)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			name, labels := meta(i)
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "job", Image: "kwok.invalid/job:fake",
					Command: []string{"/bin/sh", "-c", "sleep 3600"}}}, RestartPolicy: corev1.RestartPolicyNever},
			}
			if _, err := h.cs.CoreV1().Pods(kwok.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				mu.Lock()
				firstErr = fmt.Errorf("create filler pod %s: %w", name, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// count returns the number of pods in the namespace with label key (any
// value; "" for every pod).
func (h *harness) count(ctx context.Context, key string) (int, error) {
	l, err := h.cs.CoreV1().Pods(kwok.Namespace).List(ctx, metav1.ListOptions{LabelSelector: key, ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

// waitCount polls every 100 ms until n pods have label key.
func waitCount(ctx context.Context, h *harness, key string, n int) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		got, err := h.count(ctx, key)
		if err == nil && got == n {
			return nil
		}
		if err := h.cp.Exited(); err != nil {
			return fmt.Errorf("waiting for %d pods labelled %s (%d): %w", n, key, got, err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for %d pods labelled %s: %d (%v)", n, key, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
