package kube_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
)

// TestKube_AJobPodTheNodeHasNoCPUForSaysInsufficientCPUInItsSetupLogWhileItWaits:
// a job pod whose CPU request no node has room for waits Pending, and its
// run's setup log says why while it waits (the scheduler's "Insufficient
// cpu"), then the run ends unschedulable naming it after --pending-timeout.
// It pins what issue 37 saw as an unexplained ~4 s at --capacity 2: two
// default job pods (cpu 1, requests = limits) do not both fit a 2-CPU
// node, so the second waits for the first to be deleted
// (docs/scaling.md, "One kube runner, many job pods"); the user must be
// able to read that in the run, not guess it.
func TestKube_AJobPodTheNodeHasNoCPUForSaysInsufficientCPUInItsSetupLogWhileItWaits(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Job.CPUs = "1000" // no node of any test cluster has 1,000 CPUs free
	cfg.PendingTimeout = 5 * time.Second
	e := f.executor(t, cfg)
	id := runID("nocpu")
	var setup syncbuf.Buffer
	spec := f.spec(t, id)
	spec.Log = io.MultiWriter(spec.Log, &setup)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := e.Prepare(ctx, spec)
	if s != nil {
		_ = s.Cleanup(context.Background())
		t.Fatal("Prepare of a pod asking for 1,000 CPUs succeeded")
	}
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonUnschedulable {
		t.Fatalf("Prepare: %v, want a *executor.Fault with reason %s", err, api.ReasonUnschedulable)
	}
	if !strings.Contains(fault.Message, "Insufficient cpu") {
		t.Errorf("the fault does not name the missing CPU: %s", fault.Message)
	}
	log := setup.String()
	if !strings.Contains(log, "kube executor: waiting for the pod: Unschedulable") || !strings.Contains(log, "Insufficient cpu") {
		t.Errorf("the setup log does not say the pod waits for CPU:\n%s", log)
	}
	if left := f.leftovers(t, id); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
