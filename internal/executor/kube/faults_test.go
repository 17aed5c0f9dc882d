package kube_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

// TestKube_StepsExitStatusIsItsResult: a step's own exit status is the
// result: exit 3 is ExitCode 3 with no reason. It pins the exit code lost
// on its way from the pod (read as 0, or as a fault of the environment).
func TestKube_StepsExitStatusIsItsResult(t *testing.T) {
	f := newFixture(t)
	s := f.prepare(t, f.executor(t, f.config()), f.spec(t, runID("exit3")))
	res, out, err := runStep(t, s, "1", "echo before; exit 3", time.Minute)
	if err != nil || res.ExitCode != 3 || res.Reason != "" || string(out) != "before\n" {
		t.Fatalf("exit 3: %+v %v %q, want ExitCode 3, no reason", res, err, out)
	}
}

// TestKube_StepPastTheMemoryLimitEndsOOMKilled: a step past the pod's
// memory limit ends oom-killed (api.ReasonOOMKilled). It pins the OOM kill
// read as some exit code.
func TestKube_StepPastTheMemoryLimitEndsOOMKilled(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Memory = 64 << 20
	s := f.prepare(t, f.executor(t, cfg), f.spec(t, runID("oom")))
	// tail keeps the last "line" of 200 MB without a newline in memory.
	res, out, err := runStep(t, s, "1", "echo eating; head -c 200m /dev/zero | tail; echo survived", 2*time.Minute)
	if err != nil || res.Reason != api.ReasonOOMKilled {
		t.Fatalf("200 MB in a 64 MiB pod: %+v %v %q, want reason %s", res, err, out, api.ReasonOOMKilled)
	}
	t.Logf("result %+v, output %q", res, out)
}

// TestKube_MissingImageFailsPrepareWithinThePullGrace: an image that
// cannot be had ends Prepare with a *executor.Fault image-pull within the
// grace, leaving no pod. It pins Prepare hanging on an image that never
// comes.
func TestKube_MissingImageFailsPrepareWithinThePullGrace(t *testing.T) {
	f := newFixture(t)
	for _, policy := range []string{"Never", "IfNotPresent"} {
		t.Run(policy, func(t *testing.T) {
			cfg := f.config()
			cfg.PullPolicy = "IfNotPresent"
			if policy == "Never" {
				cfg.PullPolicy = "Never"
			}
			cfg.ImagePullGrace = 3 * time.Second
			e := f.executor(t, cfg)
			id := runID("nope")
			spec := f.spec(t, id)
			spec.Image = "localhost/knotless/nope:1"
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			t0 := time.Now()
			s, err := e.Prepare(ctx, spec)
			took := time.Since(t0)
			if s != nil {
				_ = s.Cleanup(context.Background())
				t.Fatal("Prepare with a missing image succeeded")
			}
			var fault *executor.Fault
			if !errors.As(err, &fault) || fault.Reason != api.ReasonImagePull {
				t.Fatalf("Prepare: %v, want a *executor.Fault with reason %s", err, api.ReasonImagePull)
			}
			if !strings.Contains(fault.Message, "nope") {
				t.Errorf("the fault does not name the image: %s", fault.Message)
			}
			t.Logf("Prepare failed after %s: %v", took.Round(time.Millisecond), err)
			if took > cfg.ImagePullGrace+30*time.Second {
				t.Errorf("Prepare took %s with an image pull grace of %s", took, cfg.ImagePullGrace)
			}
			if left := f.leftovers(t, id); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// TestKube_UnschedulablePodFailsPrepareAfterThePendingTimeout: a pod no
// node can take ends Prepare with a *executor.Fault unschedulable after
// PendingTimeout, naming the scheduler's message, leaving no pod. It pins
// Prepare waiting for ever on a Pending pod.
func TestKube_UnschedulablePodFailsPrepareAfterThePendingTimeout(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.NodeSelector = map[string]string{"knotless.dev/no-such-node": "really"}
	cfg.PendingTimeout = 3 * time.Second
	e := f.executor(t, cfg)
	id := runID("unsched")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := e.Prepare(ctx, f.spec(t, id))
	took := time.Since(t0)
	if s != nil {
		_ = s.Cleanup(context.Background())
		t.Fatal("Prepare of an unschedulable pod succeeded")
	}
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonUnschedulable {
		t.Fatalf("Prepare: %v, want a *executor.Fault with reason %s", err, api.ReasonUnschedulable)
	}
	// The scheduler says e.g. "0/1 nodes are available: 1 node(s) didn't
	// match Pod's node affinity/selector."
	if !strings.Contains(fault.Message, "nodes are available") {
		t.Errorf("the fault does not carry the scheduler's message: %s", fault.Message)
	}
	t.Logf("Prepare failed after %s: %v", took.Round(time.Millisecond), err)
	if took > 30*time.Second {
		t.Errorf("Prepare took %s with a pending timeout of %s", took, cfg.PendingTimeout)
	}
	if left := f.leftovers(t, id); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestKube_PodDeletedMidStepEndsTheStepPodLost: a pod deleted from
// outside the runner while a step runs ends the step pod-lost. It pins the
// step of a deleted pod read as a success (or as a cancellation by a
// person: the agent, PID 1, stops the step on the kubelet's SIGTERM).
func TestKube_PodDeletedMidStepEndsTheStepPodLost(t *testing.T) {
	f := newFixture(t)
	f.stepEndedFromOutside(t, api.ReasonPodLost, func(ctx context.Context, pod string) error {
		return f.c.Client.CoreV1().Pods(f.ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
	})
}

// TestKube_PodEvictedMidStepEndsTheStepEvicted: a pod evicted (the
// Eviction API) while a step runs ends the step evicted. It pins the step
// of an evicted pod read as a success or a cancellation.
func TestKube_PodEvictedMidStepEndsTheStepEvicted(t *testing.T) {
	f := newFixture(t)
	f.stepEndedFromOutside(t, api.ReasonEvicted, func(ctx context.Context, pod string) error {
		return f.c.Client.CoreV1().Pods(f.ns).EvictV1(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: pod, Namespace: f.ns},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)},
		})
	})
}

// stepEndedFromOutside starts a long step, ends the pod with end (as the
// admin), and wants the step's Result to have reason want.
func (f *fixture) stepEndedFromOutside(t *testing.T, want string, end func(ctx context.Context, pod string) error) {
	t.Helper()
	s := f.prepare(t, f.executor(t, f.config()), f.spec(t, runID("outside")))
	pod := podOf(t, s)
	var out syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ch := startStep(ctx, s, executor.Step{ID: "1", Script: "echo started; sleep 300; echo finished"}, &out)
	waitOutput(t, &out, "started\n", time.Minute)
	if err := end(ctx, pod); err != nil {
		t.Fatal(err)
	}
	res, err := await(t, ch, 2*time.Minute)
	t.Logf("after the pod's end from outside: %+v, err %v, output %q", res, err, out.Bytes())
	if err == nil && res.Reason == "" && res.ExitCode == 0 {
		t.Fatal("the step of a pod ended from outside succeeded")
	}
	if res.Reason != want {
		t.Fatalf("result %+v, err %v; want reason %s", res, err, want)
	}
}

// waitOutput waits until out starts with want.
func waitOutput(t *testing.T, out *syncbuf.Buffer, want string, d time.Duration) {
	t.Helper()
	testwait.Until(t, d, "the output to start with "+strconv.Quote(want), func() (bool, string) {
		return strings.HasPrefix(string(out.Bytes()), want), fmt.Sprintf("%q", out.Bytes())
	})
}

// TestKube_StepEndsAtItsExitAndItsBackgroundProcessWithIt: a step that
// leaves a process in the background ends at its own exit, and the process
// does not outlive it. It pins a background process holding the step
// open.
func TestKube_StepEndsAtItsExitAndItsBackgroundProcessWithIt(t *testing.T) {
	f := newFixture(t)
	s := f.prepare(t, f.executor(t, f.config()), f.spec(t, runID("bg")))
	t0 := time.Now()
	res, out, err := runStep(t, s, "1", "sleep 300 & echo started", time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "started\n" {
		t.Fatalf("background step: %+v %v %q", res, err, out)
	}
	if took := time.Since(t0); took > 20*time.Second {
		t.Errorf("the step took %s: the background process held it open", took)
	}
	res, out, err = runStep(t, s, "2", "ps 2>/dev/null | grep -c '[s]leep 300' || true", time.Minute)
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("the background process outlived its step: %+v %v %q", res, err, out)
	}
}

// TestKube_CancelledStepEndsCancelledAndCleanupRemovesThePod: cancelling
// a step (the run's ctx) ends it cancelled, and after Cleanup the pod is
// gone; it logs how long the pod took to go (the target: 2 s). It
// pins a cancelled run leaving its pod behind.
func TestKube_CancelledStepEndsCancelledAndCleanupRemovesThePod(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	s, err := e.Prepare(context.Background(), f.spec(t, runID("cancel")))
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf(t, s)
	var out syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := startStep(ctx, s, executor.Step{ID: "1", Script: "echo started; sleep 300", Grace: time.Second}, &out)
	waitOutput(t, &out, "started\n", time.Minute)
	cancel()
	res, err := await(t, ch, time.Minute)
	if err != nil || res.Reason != api.ReasonCancelled {
		t.Fatalf("cancelled step: %+v %v, want reason %s", res, err, api.ReasonCancelled)
	}
	t0 := time.Now()
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	if err := s.Cleanup(cctx); err != nil {
		t.Fatal(err)
	}
	cleanup := time.Since(t0)
	gone := f.waitGone(t, pod, 30*time.Second) + cleanup
	t.Logf("pod gone %s after the run's end (Cleanup returned after %s); target 2s", gone.Round(time.Millisecond), cleanup.Round(time.Millisecond))
}

// TestKube_PodIsGoneWithinSecondsOfTheRunsCleanup: after a run's end and
// its Cleanup, the pod is gone within seconds; it logs the time (target:
// 2 s). It pins a pod that outlives its run.
func TestKube_PodIsGoneWithinSecondsOfTheRunsCleanup(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	s, err := e.Prepare(context.Background(), f.spec(t, runID("end")))
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf(t, s)
	res, _, err := runStep(t, s, "1", "echo done", time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v %v", res, err)
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	cleanup := time.Since(t0)
	gone := f.waitGone(t, pod, 30*time.Second) + cleanup
	t.Logf("pod gone %s after the run's end (Cleanup returned after %s); target 2s", gone.Round(time.Millisecond), cleanup.Round(time.Millisecond))
	if gone > 10*time.Second {
		t.Errorf("the pod took %s to go after the run's end", gone)
	}
}

// TestKube_SweepAfterAKilledRunnerRemovesItsPodUnlessKept: the restart of
// a runner that was SIGKILLed mid-run: executor A prepares a run and
// starts a long step, then its process "dies" (every connection it had to
// the API server is cut at once through a proxy, its watch closed; no
// Detach, no Cleanup). A new executor B of the same runner, namespace and
// identity sweeps at start: with the run in keep the pod stays, with keep
// nil it is gone. It pins a killed runner's pod leaked.
func TestKube_SweepAfterAKilledRunnerRemovesItsPodUnlessKept(t *testing.T) {
	f := newFixture(t)
	px := newProxy(t, f.rest.Host, 0)
	cfgA := f.config()
	cfgA.Rest = px.config(f.rest)
	a, err := kube.New(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	id := runID("killed")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sA, err := a.Prepare(ctx, f.spec(t, id))
	if err != nil {
		t.Fatal(err)
	}
	pod := podOf(t, sA)
	var out syncbuf.Buffer
	stepCtx, stepCancel := context.WithCancel(context.Background())
	ch := startStep(stepCtx, sA, executor.Step{ID: "1", Script: "echo started; sleep 600"}, &out)
	waitOutput(t, &out, "started\n", time.Minute)
	// SIGKILL: every connection of A's process drops, nothing is said.
	px.stop()
	a.Close()
	t.Cleanup(func() {
		// Let A's orphaned Exec go (it would retry its dead route for 2 min).
		_ = sA.Detach()
		stepCancel()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
		}
	})

	b := f.executor(t, f.config())
	if err := b.Sweep(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	p, err := f.c.Client.CoreV1().Pods(f.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("Sweep(keep=[%s]) removed the kept run's pod: %v", id, err)
	}
	t0 := time.Now()
	if err := b.Sweep(ctx, nil); err != nil {
		t.Fatal(err)
	}
	gone := f.waitGone(t, pod, 30*time.Second) + time.Since(t0)
	t.Logf("the orphaned pod was gone %s after B's Sweep started", gone.Round(time.Millisecond))
	if _, err := f.c.Client.CoreV1().Pods(f.ns).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod %s after Sweep: %v", pod, err)
	}
}

// TestKube_EphemeralPodOfAKilledExecStopsRunning: with Ephemeral the
// agent ends the step and exits once no runner has been connected for
// OrphanAfter, and the pod stops running. It pins the new-user trial's
// finding: `knotless-run exec` killed with SIGKILL (no Cleanup, no Detach:
// its connection just ends) left its job pod running its step until the
// run's deadline, holding the node's cpu.
func TestKube_EphemeralPodOfAKilledExecStopsRunning(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Ephemeral, cfg.OrphanAfter = true, 3*time.Second
	e := f.executor(t, cfg)
	s := f.prepare(t, e, f.spec(t, runID("orphan")))
	pod := podOf(t, s)
	ch := make(chan error, 1)
	var out syncbuf.Buffer
	go func() {
		_, err := s.Exec(context.Background(), executor.Step{ID: "1", Script: "echo started; sleep 600"}, &out)
		ch <- err
	}()
	waitOutput(t, &out, "started\n", time.Minute)
	// As a SIGKILL would: the connection ends, nothing else happens.
	_ = s.Detach()
	<-ch
	testwait.UntilEvery(t, 90*time.Second, 500*time.Millisecond, "the pod of a runner that vanished to stop running", func() (bool, string) {
		p := f.storedPod(t, pod)
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase)
	})
}
