package runner

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/dummy"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/internal/workflow"
)

// Points where a run's phases call out, and where phasesRun stops it to
// act: the checkout and Prepare (session, set up), Recover (session, taken
// over), step 1's Exec (steps), reading the exports (afterSteps) and the
// environment's Cleanup (release).
const (
	atCheckout = "checkout"
	atPrepare  = "prepare"
	atRecover  = "recover"
	atStep     = "step"
	atExports  = "exports"
	atCleanup  = "cleanup"
)

// gate stops a run at one point until the test acted and released it (or
// the call's context ended).
type gate struct {
	at      string
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func newGate(at string) *gate {
	return &gate{at: at, reached: make(chan struct{}), release: make(chan struct{})}
}

// wait blocks at point until released, if point is the gate's; a step
// only announces it is reached (the dummy step itself waits).
func (g *gate) wait(ctx context.Context, point string) error {
	if g == nil || point != g.at {
		return nil
	}
	g.once.Do(func() { close(g.reached) })
	if point == atStep {
		return nil
	}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// gatedExecutor is the dummy executor with its calls passing through g.
type gatedExecutor struct {
	executor.Executor
	g *gate
}

func (x gatedExecutor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	if err := x.g.wait(ctx, atPrepare); err != nil {
		return nil, err
	}
	s, err := x.Executor.Prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return gatedSession{s, x.g}, nil
}

func (x gatedExecutor) Recover(ctx context.Context, h executor.Handle) (executor.Session, error) {
	if err := x.g.wait(ctx, atRecover); err != nil {
		return nil, err
	}
	s, err := x.Executor.Recover(ctx, h)
	if err != nil {
		return nil, err
	}
	return gatedSession{s, x.g}, nil
}

type gatedSession struct {
	executor.Session
	g *gate
}

func (s gatedSession) Exec(ctx context.Context, st executor.Step, out io.Writer) (executor.Result, error) {
	if st.ID == "1" {
		_ = s.g.wait(ctx, atStep)
	}
	return s.Session.Exec(ctx, st, out)
}

func (s gatedSession) CopyOut(ctx context.Context, src, dst string) error {
	if src == workflow.ExportFile {
		if err := s.g.wait(ctx, atExports); err != nil {
			return err
		}
	}
	return s.Session.CopyOut(ctx, src, dst)
}

func (s gatedSession) Cleanup(ctx context.Context) error {
	if err := s.g.wait(ctx, atCleanup); err != nil {
		return err
	}
	return s.Session.Cleanup(ctx)
}

const phasesWorkflow = "on: {push: {}}\nsteps:\n  - run: |\n      echo before\n      wait go\n      echo after\n  - run: echo second\n"

// phasesProcess is one runner process's Execute of the run of sp: it
// stops the run at point at, hands the run over ("handover") or cancels it
// ("cancel") there, lets it go on, and returns its result. openGo lets
// step 1 finish (once the step's point is past).
func phasesProcess(t *testing.T, world *dummy.World, sp *logship.Spool, resume *Resume, at, action string, openGo func()) Result {
	t.Helper()
	job := testJob(t, phasesWorkflow)
	var g *gate
	if at != "" {
		g = newGate(at)
	}
	job.Resume = resume
	job.Checkout = func(ctx context.Context, c workflow.Checkout, log io.Writer) error {
		return g.wait(ctx, atCheckout)
	}
	handover := make(chan struct{})
	job.Handover = handover
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan Result, 1)
	go func() { done <- Execute(ctx, job, gatedExecutor{dummy.New(world), g}, SpoolReporter{Spool: sp}) }()
	if g == nil {
		openGo()
		return testwait.Receive(t, done, 30*time.Second, "the run's end")
	}
	if at != atStep {
		openGo()
	}
	select {
	case <-g.reached:
	case res := <-done:
		t.Fatalf("the run ended (%+v) before it reached %s", res, at)
	case <-time.After(30 * time.Second):
		t.Fatalf("the run did not reach %s", at)
	}
	if at == atStep {
		testwait.For(t, 10*time.Second, "step 1 started", func() bool { return world.Started("run-42", "1") > 0 })
	}
	switch action {
	case "handover":
		close(handover)
	case "cancel":
		cancel(ErrCancelled)
	}
	if action == "handover" && (at == atCheckout || at == atPrepare || at == atRecover) {
		// Not released: a handover must cut setup short by itself (the
		// run's end never comes otherwise, and the test fails waiting).
	} else {
		close(g.release)
	}
	if at == atStep && action == "cancel" {
		openGo() // a step that ignored the stop would end now, succeeded
	}
	return testwait.Receive(t, done, 30*time.Second, "the run's end")
}

// takeOverFrom reads the journal of sp as a restarted runner does.
func takeOverFrom(t *testing.T, sp *logship.Spool) *Resume {
	t.Helper()
	rec, err := sp.Record()
	if err != nil {
		t.Fatal(err)
	}
	r, err := resumeOf(sp, rec, "test", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestExecute_EveryPhaseHandsOverTakesOverAndCancelsAsOneRun drives one
// run through its phases (execution.run) over the dummy executor, fresh
// or taken over, and at each phase's call out hands it over or cancels it.
// Whatever happens where, the run ends once (one result in the journal),
// with the state a person expects (a handover is never a result: the
// successor finishes the run; a cancel before the steps' end is
// cancelled/cancelled; one after it does not undo their success), step 1
// is started at most once across processes, and the result says
// truthfully whether the environment is gone.
func TestExecute_EveryPhaseHandsOverTakesOverAndCancelsAsOneRun(t *testing.T) {
	type proc struct{ at, action string }
	cases := []struct {
		name  string
		procs []proc // the processes in order; a handover makes the next one take over
		want  string
		// started is how often step 1 starts in all; setup and step1 are
		// the final states of setup and step 1.
		started      int
		setup, step1 string
	}{
		{"fresh", []proc{{"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},

		{"handed over at checkout", []proc{{atCheckout, "handover"}, {"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		{"handed over at prepare", []proc{{atPrepare, "handover"}, {"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		{"handed over at step", []proc{{atStep, "handover"}, {"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		{"handed over at exports", []proc{{atExports, "handover"}, {"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		{"handed over at cleanup ends here", []proc{{atCleanup, "handover"}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},

		{"taken over, handed over at recover", []proc{{atStep, "handover"}, {atRecover, "handover"}, {"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		{"taken over, handed over at step", []proc{{atStep, "handover"}, {atStep, "handover"}, {"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		{"taken over, handed over at exports", []proc{{atStep, "handover"}, {atExports, "handover"}, {"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		{"taken over before its session, handed over at prepare", []proc{{atCheckout, "handover"}, {atPrepare, "handover"}, {"", ""}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},

		{"cancelled at checkout", []proc{{atCheckout, "cancel"}}, api.StateCancelled, 0, api.StepCancelled, api.StepSkipped},
		{"cancelled at prepare", []proc{{atPrepare, "cancel"}}, api.StateCancelled, 0, api.StepCancelled, api.StepSkipped},
		{"cancelled at step", []proc{{atStep, "cancel"}}, api.StateCancelled, 1, api.StepSucceeded, api.StepCancelled},
		{"cancelled at exports", []proc{{atExports, "cancel"}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		{"cancelled at cleanup", []proc{{atCleanup, "cancel"}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
		// A step the first process left running was reported skipped
		// when the successor's run ended before reaching it again.
		{"taken over, cancelled at recover", []proc{{atStep, "handover"}, {atRecover, "cancel"}}, api.StateCancelled, 1, api.StepSucceeded, api.StepCancelled},
		{"taken over, cancelled at step", []proc{{atStep, "handover"}, {atStep, "cancel"}}, api.StateCancelled, 1, api.StepSucceeded, api.StepCancelled},
		{"taken over, cancelled at cleanup", []proc{{atStep, "handover"}, {atCleanup, "cancel"}}, api.StateSucceeded, 1, api.StepSucceeded, api.StepSucceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			world := dummy.NewWorld()
			var goOnce sync.Once
			openGo := func() { goOnce.Do(func() { world.Open("go") }) }
			sp, err := logship.CreateSpool(t.TempDir(), 42)
			if err != nil {
				t.Fatal(err)
			}
			var resume *Resume
			var res Result
			for i, p := range tc.procs {
				res = phasesProcess(t, world, sp, resume, p.at, p.action, openGo)
				last := i == len(tc.procs)-1
				if res.State == "" {
					if last {
						t.Fatalf("process %d handed the run over; nobody takes it over", i+1)
					}
					if done, _ := sp.Completed(); done {
						t.Fatalf("process %d handed the run over and recorded a result", i+1)
					}
					resume = takeOverFrom(t, sp)
					continue
				}
				if !last {
					t.Fatalf("process %d ended the run %+v; want it handed over at %s", i+1, res, p.at)
				}
			}
			if res.State != tc.want {
				t.Errorf("result %+v, want %s; setup log:\n%s", res, tc.want, readLog(t, sp, 0))
			}
			if tc.want == api.StateCancelled && res.Reason != api.ReasonCancelled {
				t.Errorf("reason %q, want cancelled", res.Reason)
			}
			if n := world.Started("run-42", "1"); n != tc.started {
				t.Errorf("step 1 started %d times, want %d", n, tc.started)
			}
			if gone := len(world.IDs()) == 0; res.EnvironmentRemoved != gone {
				t.Errorf("result says environment removed %v; environments left: %v", res.EnvironmentRemoved, world.IDs())
			}
			rec, err := sp.Record()
			if err != nil || rec.Complete == nil {
				t.Fatalf("journal has no result: %+v, %v", rec.Complete, err)
			}
			if rec.Complete.State != tc.want {
				t.Errorf("journal's result %s, Execute's %s", rec.Complete.State, tc.want)
			}
			if s := rec.Steps[0].State; s != tc.setup {
				t.Errorf("setup %s, want %s", s, tc.setup)
			}
			if s := rec.Steps[1].State; s != tc.step1 {
				t.Errorf("step 1 %s, want %s", s, tc.step1)
			}
			if tc.want == api.StateSucceeded {
				var lines []string
				for _, l := range strings.SplitAfter(readLog(t, sp, 1), "\n") {
					if !strings.HasPrefix(l, "[knotless:") {
						lines = append(lines, l)
					}
				}
				if got := strings.Join(lines, ""); got != "before\nafter\n" {
					t.Errorf("step 1's log %q, want its output once", got)
				}
				if s := rec.Steps[2].State; s != api.StepSucceeded {
					t.Errorf("step 2 %s", s)
				}
			}
		})
	}
}
