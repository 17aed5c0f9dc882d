package runner

import (
	"context"
	"errors"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/logship"
)

// history is what earlier runner processes recorded of a run (Job.Resume,
// read from the spool's journal): empty for a run this process began, so
// that a phase looks a step up without asking which kind of run it is.
type history struct {
	// takenOver: an earlier process began the run; by says who took it
	// over (for the setup log and the restart marker).
	takenOver bool
	by        string
	// started is when the run began (now, for a run this process begins):
	// its timeout counts from then.
	started time.Time
	// steps are the latest updates recorded, by step index (0 is setup);
	// stepStarted the start of each step begun (its id tokens' issue
	// time); checkpoints how far each step's log got into its raw output.
	steps       map[int]api.UpdateStepInput
	stepStarted map[int]time.Time
	checkpoints map[int]logship.Checkpoint
	// outputsCollected: an earlier process packed the outputs already.
	outputsCollected bool
}

// historyOf returns the history r holds; nil r is a run that begins now.
func historyOf(r *Resume, now time.Time) history {
	if r == nil {
		return history{started: now}
	}
	h := history{takenOver: true, by: r.By, started: r.Started, steps: r.Steps, stepStarted: r.StepStarted,
		checkpoints: r.Checkpoints, outputsCollected: r.OutputsCollected}
	if h.by == "" {
		h.by = "a new knotless-run process"
	}
	if h.started.IsZero() {
		h.started = now
	}
	return h
}

// step returns the latest update recorded of step idx other than pending.
func (h history) step(idx int) (api.UpdateStepInput, bool) {
	u, ok := h.steps[idx]
	return u, ok && u.State != api.StepPending
}

// running returns the checkpoint of step idx if an earlier process left
// it running (the zero checkpoint, when it recorded none: the log resumes
// from the step's first byte).
func (h history) running(idx int) (*logship.Checkpoint, bool) {
	if u, ok := h.step(idx); !ok || u.State != api.StepRunning {
		return nil, false
	}
	c := h.checkpoints[idx]
	return &c, true
}

// ended reports whether step idx reached a final state before.
func (h history) ended(idx int) bool {
	u, ok := h.step(idx)
	return ok && u.State != api.StepRunning
}

// stepRan reports whether a step of the workflow (not setup) was started
// before.
func (h history) stepRan() bool {
	for idx, u := range h.steps {
		if idx > 0 && u.State != api.StepPending && u.State != api.StepSkipped {
			return true
		}
	}
	return false
}

// errRunEnding ends this process's hold on a run it finishes itself: from
// then on a handover no longer lets the run go (its result is reported).
var errRunEnding = errors.New("the run ends in this runner process")

// holdRun returns the context of this process's hold on a run of job: it
// ends with cause errHandedOver once job.Handover closes, unless end was
// called first (with errRunEnding, when the run's end begins here). The
// first cause stands, so the question "was the run handed over?" has one
// answer from then on. end must be called once the run is done with.
func holdRun(job Job) (held context.Context, end context.CancelCauseFunc) {
	held, end = context.WithCancelCause(context.Background())
	if job.Handover != nil {
		go func() {
			select {
			case <-job.Handover:
				end(errHandedOver)
			case <-held.Done():
			}
		}()
	}
	return held, end
}

// handedOver reports whether the runner let go of the run for its
// successor: the hold ended with errHandedOver. It is the one way the
// phases learn of a handover.
func (e *execution) handedOver() bool {
	return errors.Is(context.Cause(e.held), errHandedOver)
}

// takeEnd decides, once, who finishes the run: it ends the hold for this
// process to finish it, and reports whether it still holds the run (false:
// it was handed over first). From then on a handover no longer applies. A
// handover whose channel closed before takeEnd wins even if the watcher has
// not said so yet: the answer does not depend on goroutine scheduling.
func (e *execution) takeEnd() bool {
	select {
	case <-e.job.Handover: // nil: never
		e.endHold(errHandedOver)
	default:
		e.endHold(errRunEnding)
	}
	return !e.handedOver()
}

// onHandover calls f (in its own goroutine) if and when the run is handed
// over; stop prevents it (see context.AfterFunc).
func (e *execution) onHandover(f func()) (stop func() bool) {
	return context.AfterFunc(e.held, func() {
		if e.handedOver() {
			f()
		}
	})
}
