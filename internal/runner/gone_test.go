package runner

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// goneExecutor's sessions lose their environment during the first step:
// the step ends pod-lost, and every copy after it fails as a copy from a
// job pod that is gone does (executor.ErrEnvironmentGone).
// With afterStep, the steps run and the environment goes after them.
type goneExecutor struct {
	executor.Executor
	afterStep bool
}

func (g goneExecutor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	s, err := g.Executor.Prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return goneSession{s, g.afterStep}, nil
}

type goneSession struct {
	executor.Session
	afterStep bool
}

var errPodGone = fmt.Errorf("%w: the job pod knotless-run-42 is gone", executor.ErrEnvironmentGone)

func (s goneSession) Exec(ctx context.Context, st executor.Step, out io.Writer) (executor.Result, error) {
	if s.afterStep {
		return s.Session.Exec(ctx, st, out)
	}
	return executor.Result{ExitCode: -1, Reason: api.ReasonPodLost, Note: "the job pod knotless-run-42 is gone (deleted from outside the runner)"}, nil
}

func (s goneSession) CopyOut(ctx context.Context, src, dst string) error {
	return fmt.Errorf("copy %s: %w", src, errPodGone)
}

// Once the run's environment is known gone (its step ended pod-lost),
// what comes after the steps (exports, outputs) says once that it was
// skipped and why, not each as an error of its own. (Before: the setup
// log added "exports: .knotless/export.env not read: copy ... agent is
// gone: the job pod ... is gone" and "outputs: not collected: ..." as if
// more had failed.)
func TestExecute_AfterTheEnvironmentIsGoneOneLineSaysWhatWasSkipped(t *testing.T) {
	job := testJob(t, `
outputs: [dist/]
steps: [{run: "true"}]
`)
	rep := newMemReporter()
	res := Execute(context.Background(), job, goneExecutor{Executor: testShell(t)}, rep)
	if res.State != api.StateErrored || res.Reason != api.ReasonPodLost {
		t.Fatalf("result %+v, want errored/pod-lost", res)
	}
	setup := rep.log(0)
	t.Logf("setup log:\n%s", setup)
	want := "exports and outputs: skipped: the run's environment is gone"
	if strings.Count(setup, want) != 1 {
		t.Errorf("the setup log does not say once %q:\n%s", want, setup)
	}
	for _, bad := range []string{"not read", "outputs: not collected", "agent is gone"} {
		if strings.Contains(setup, bad) {
			t.Errorf("the setup log says %q after the environment is gone:\n%s", bad, setup)
		}
	}
}

// The same when the environment goes after the last step: reading the
// exports finds the step agent gone, and that one line says so, once.
func TestExecute_EnvironmentGoneAfterTheStepsIsSaidOnce(t *testing.T) {
	job := testJob(t, `
outputs: [dist/]
steps: [{run: "true"}]
`)
	rep := newMemReporter()
	Execute(context.Background(), job, goneExecutor{Executor: testShell(t), afterStep: true}, rep)
	setup := rep.log(0)
	want := "exports and outputs: skipped: the run's environment is gone (copy .knotless/export.env: agent is gone: the job pod knotless-run-42 is gone)"
	if strings.Count(setup, want) != 1 || strings.Contains(setup, "not read") || strings.Contains(setup, "outputs: not collected") {
		t.Errorf("the setup log does not say once %q, and nothing else of it:\n%s", want, setup)
	}
}
