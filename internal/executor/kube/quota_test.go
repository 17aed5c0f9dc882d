package kube_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// lockedLog is a setup log a test can read while Prepare writes it.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// noRoom makes a ResourceQuota that allows no pod in the fixture's
// namespace, as its admin; the returned func removes it.
func (f *fixture) noRoom(t *testing.T) func() {
	t.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-room"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if _, err := f.c.Client.CoreV1().ResourceQuotas(f.ns).Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota controller fills in its status before admission enforces it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := f.c.Client.CoreV1().ResourceQuotas(f.ns).Get(context.Background(), "no-room", metav1.GetOptions{})
		if err == nil && got.Status.Hard != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the quota has no status after 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var once sync.Once
	remove := func() {
		once.Do(func() {
			_ = f.c.Client.CoreV1().ResourceQuotas(f.ns).Delete(context.Background(), "no-room", metav1.DeleteOptions{})
		})
	}
	t.Cleanup(remove)
	return remove
}

// TestKube_QuotaRefusalWaitsUntilTheQuotaFrees: a ResourceQuota refusing
// the job pod errored the run in 0.15 s, even when the quota freed 10 s
// later. The run now waits, saying why in its setup log, and starts once
// there is room.
func TestKube_QuotaRefusalWaitsUntilTheQuotaFrees(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	free := f.noRoom(t)
	spec := f.spec(t, runID("quota"))
	log := &lockedLog{}
	spec.Log = log
	done := make(chan error, 1)
	var s executor.Session
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var err error
		s, err = e.Prepare(ctx, spec)
		done <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(log.String(), "waiting: the namespace") {
		if time.Now().After(deadline) {
			t.Fatalf("no waiting line in the setup log:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(log.String(), "exceeded quota") {
		t.Errorf("the waiting line does not name the quota:\n%s", log.String())
	}
	free()
	if err := <-done; err != nil {
		t.Fatalf("Prepare after the quota freed: %v", err)
	}
	defer s.Cleanup(context.Background())
	res, out, err := runStep(t, s, "1", "echo ran", time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "ran\n" {
		t.Errorf("step: %+v %v %q", res, err, out)
	}
}

// TestKube_QuotaThatNeverFreesErrorsNamingItAfterThePendingTimeout, and
// a run cancelled while it waits makes no pod.
func TestKube_QuotaThatNeverFreesErrorsNamingItAfterThePendingTimeout(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.PendingTimeout = 3 * time.Second
	e := f.executor(t, cfg)
	f.noRoom(t)
	fault, _ := prepareFault(t, e, f.spec(t, runID("quota")))
	if fault.Reason != api.ReasonUnschedulable || !strings.Contains(fault.Message, "exceeded quota") || !strings.Contains(fault.Message, "--pending-timeout") {
		t.Errorf("fault %+v", fault)
	}
	cfg.PendingTimeout = time.Hour
	e = f.executor(t, cfg)
	spec := f.spec(t, runID("quota-cancel"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := e.Prepare(ctx, spec); err == nil {
		t.Fatal("Prepare succeeded under a quota of no pods")
	}
	if left := f.leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("a cancelled waiting run left %v", left)
	}
}
