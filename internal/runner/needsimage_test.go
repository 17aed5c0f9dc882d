package runner

import (
	"context"
	"strings"
	"sync"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// specExecutor keeps the spec of every environment it is asked for.
type specExecutor struct {
	executor.Executor
	mu    sync.Mutex
	specs []executor.Spec
}

func (s *specExecutor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	s.mu.Lock()
	s.specs = append(s.specs, spec)
	s.mu.Unlock()
	return s.Executor.Prepare(ctx, spec)
}

// The image a run built and exported (a digest) is the image of the run
// that needs it: the executor is asked for the image with the needed run's
// value in it, and the setup log says where it came from.
func TestExecute_ImageTakesTheValueTheNeededRunExported(t *testing.T) {
	const digest = "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
	job := testJob(t, `
needs: [image]
image: "registry.example.com/app@{{ needs.image.DIGEST }}"
steps: [{run: "true"}]
`)
	job.Needs = []api.NeededRun{{Run: 41, Name: "image", Workflow: "image", Exports: map[string]string{"DIGEST": digest}}}
	ex := &specExecutor{Executor: testShell(t)}
	rep := newMemReporter()
	if res := Execute(context.Background(), job, ex, rep); res.State != api.StateSucceeded {
		t.Fatalf("result %+v\n%s", res, rep.log(0))
	}
	if len(ex.specs) != 1 || ex.specs[0].Image != "registry.example.com/app@"+digest {
		t.Fatalf("the executor was asked for %+v, want one environment of image registry.example.com/app@%s", ex.specs, digest)
	}
	if want := "image registry.example.com/app@" + digest + " (from the needed runs' exports: registry.example.com/app@{{needs.image.DIGEST}})"; !strings.Contains(rep.log(0), want) {
		t.Errorf("the setup log does not say %q:\n%s", want, rep.log(0))
	}
}

// An image whose value the needed run did not export ends the run errored
// (workflow-invalid) before any environment is made, naming the value and
// what the run did export.
func TestExecute_ImageOfAValueNeverExportedEndsTheRunBeforeAnyEnvironment(t *testing.T) {
	job := testJob(t, `
needs: [image]
image: "registry.example.com/app@{{ needs.image.DIGEST }}"
steps: [{run: "true"}]
`)
	job.Needs = []api.NeededRun{{Run: 41, Name: "image", Workflow: "image", Exports: map[string]string{"TAG": "1"}}}
	ex := &specExecutor{Executor: testShell(t)}
	rep := newMemReporter()
	res := Execute(context.Background(), job, ex, rep)
	if res.State != api.StateErrored || res.Reason != api.ReasonWorkflowInvalid || !strings.Contains(res.Message, "the run of image exported no DIGEST (it exported: TAG;") {
		t.Fatalf("result %+v, want errored (workflow-invalid) naming DIGEST and TAG", res)
	}
	if len(ex.specs) != 0 {
		t.Errorf("an environment was made: %+v", ex.specs)
	}
}
