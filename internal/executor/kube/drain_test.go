package kube_test

import (
	"context"
	"os"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
)

// TestKube_DrainWaitsForTheRunWithThePodDisruptionBudget: with the
// optional budget of deploy/kubernetes/pdb applied, a drain's eviction of
// a running job pod is refused (429: the budget) and the run ends with
// its true result; the positive control without the budget is
// TestKube_PodEvictedMidStepEndsTheStepEvicted (evicted).
func TestKube_DrainWaitsForTheRunWithThePodDisruptionBudget(t *testing.T) {
	f := newFixture(t)
	raw, err := os.ReadFile("../../../deploy/kubernetes/pdb/poddisruptionbudget.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pdb policyv1.PodDisruptionBudget
	if err := yaml.Unmarshal(raw, &pdb); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := f.c.Client.PolicyV1().PodDisruptionBudgets(f.ns).Create(ctx, &pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := f.prepare(t, f.executor(t, f.config()), f.spec(t, runID("pdb")))
	pod := podOf(t, s)
	var out syncbuf.Buffer
	ch := startStep(ctx, s, executor.Step{ID: "1", Script: "echo started; sleep 8; echo finished"}, &out)
	waitOutput(t, &out, "started\n", time.Minute)
	// The budget's controller computes its status before the Eviction API
	// uses it: evict until the answer is the budget's refusal.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f.c.Client.CoreV1().Pods(f.ns).EvictV1(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: pod, Namespace: f.ns},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)},
		})
		if apierrors.IsTooManyRequests(err) {
			break
		}
		if err == nil {
			t.Fatal("the job pod was evicted despite the budget")
		}
		if time.Now().After(deadline) {
			t.Fatalf("eviction: %v, want 429 from the budget", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	res, err := await(t, ch, 2*time.Minute)
	if err != nil || res.ExitCode != 0 || res.Reason != "" || string(out.Bytes()) != "started\nfinished\n" {
		t.Errorf("the run under the budget: %+v, %v, %q", res, err, out.Bytes())
	}
}
