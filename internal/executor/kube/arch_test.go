package kube_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/test/kubetest"
)

// prepareFault prepares spec and returns the Fault it fails with, within
// a minute; the test fails if it succeeds or fails otherwise.
func prepareFault(t *testing.T, e executor.Executor, spec executor.Spec) (*executor.Fault, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := e.Prepare(ctx, spec)
	took := time.Since(t0)
	if err == nil {
		_ = s.Cleanup(ctx)
		t.Fatalf("Prepare succeeded")
	}
	var f *executor.Fault
	if !errors.As(err, &f) {
		t.Fatalf("Prepare: %v, want an *executor.Fault", err)
	}
	return f, took
}

// TestKube_PodReportingArm64GetsTheArm64Agent: the runner sends each job
// pod the agent of the architecture the pod reports (uname -m), so one
// runner serves amd64 and arm64 nodes. Here the pod's uname says aarch64
// on an amd64 node: the arm64 agent is chosen, cannot execute, and the
// run ends within seconds naming it, not after a two-minute wait as
// "agent is gone ... exec format error".
func TestKube_PodReportingArm64GetsTheArm64Agent(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Agent = agenttest.WithArch(t, "arm64")
	spec := f.spec(t, runID("fakearm"))
	spec.Image = kubetest.JobFakeArmImage
	fault, took := prepareFault(t, f.executor(t, cfg), spec)
	if fault.Reason != api.ReasonUnsupported || !strings.Contains(fault.Message, "linux/arm64") || !strings.Contains(fault.Message, "exec format error") {
		t.Errorf("fault %+v, want unsupported naming linux/arm64 and exec format error", fault)
	}
	if took > time.Minute {
		t.Errorf("it took %s to say so", took)
	}
	if left := f.leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestKube_Arm64OnlyImageFailsFastNamingTheArchitecture: an image built
// for another architecture than its node's cannot start its PID 1 (exec
// format error). The run ends within seconds, errored, saying so, never
// as pod-lost with "exit code 1" nor after a two-minute wait.
func TestKube_Arm64OnlyImageFailsFastNamingTheArchitecture(t *testing.T) {
	f := newFixture(t)
	spec := f.spec(t, runID("arm64only"))
	spec.Image = kubetest.JobArm64OnlyImage
	fault, took := prepareFault(t, f.executor(t, f.config()), spec)
	if fault.Reason != api.ReasonUnsupported || !strings.Contains(fault.Message, "exec format error") || !strings.Contains(fault.Message, "another architecture") {
		t.Errorf("fault %+v, want unsupported naming exec format error and the architecture", fault)
	}
	if took > time.Minute {
		t.Errorf("it took %s to say so", took)
	}
}

// TestKube_AgentSentBeforeThePodAsksOnlyForTheMachineItReports: once a
// node's job pod has reported its machine (uname -m), the next delivery
// on that node sends the agent as soon as the exec is open, before the
// pod asks. A pod there that reports another machine (an image whose
// uname says aarch64) reads none of those bytes: the delivery asks again
// and sends the arm64 agent, which cannot execute here, and the run ends
// naming linux/arm64, as it does without the early send.
func TestKube_AgentSentBeforeThePodAsksOnlyForTheMachineItReports(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	var log syncbuf.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Agent = agenttest.WithArch(t, "arm64")
	e := f.executor(t, cfg)
	const asked, early = `msg="step agent delivered" `, `msg="step agent delivered before the pod asked" `

	f.prepare(t, e, f.spec(t, runID("first")))
	if got := string(log.Bytes()); !strings.Contains(got, asked) || strings.Contains(got, early) {
		t.Fatalf("the node's first job pod: want the agent sent when asked, once; executor log:\n%s", got)
	}
	f.prepare(t, e, f.spec(t, runID("second")))
	if got := string(log.Bytes()); strings.Count(got, asked) != 1 || strings.Count(got, early) != 1 {
		t.Fatalf("the node's second job pod: want the agent sent before it asked; executor log:\n%s", got)
	}

	spec := f.spec(t, runID("otherarch"))
	spec.Image = kubetest.JobFakeArmImage
	fault, _ := prepareFault(t, e, spec)
	if fault.Reason != api.ReasonUnsupported || !strings.Contains(fault.Message, "linux/arm64") || !strings.Contains(fault.Message, "exec format error") {
		t.Errorf("fault %+v, want unsupported naming linux/arm64 and exec format error", fault)
	}
	if got := string(log.Bytes()); !strings.Contains(got, "this pod reports another (aarch64, not x86_64)") {
		t.Errorf("the early amd64 send was not refused by the aarch64 pod; executor log:\n%s", got)
	}
	if left := f.leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
