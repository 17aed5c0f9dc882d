package runlog

import (
	"fmt"
	"time"

	"knotless.dev/knotless/internal/api"
)

// SetupDone is the word the setup log's footer shows when setup got
// through (the API's step state is api.StepSucceeded, or none at all).
const SetupDone = "done"

// StepHeader is printed before a step's log, e.g. "── step 1/3: build ──\n".
// total is the number of workflow steps; index 0 is the setup log.
func StepHeader(index, total int, name string) string {
	if index == api.SetupStep {
		return "── setup ──\n"
	}
	return fmt.Sprintf("── step %d/%d: %s ──\n", index, total, name)
}

// StepFooter is printed after a step's log: its state, exit code, reason
// (left out when it says no more than the state, e.g. a cancelled step's
// reason "cancelled", or exit-code next to the exit code) and duration
// (0 = unknown, omitted), rounded to 10 ms. `knotless run logs` passes the
// duration the server records (the runner's start and end of the step);
// `knotless-run exec` passes 0, so its output reads the same from run to
// run. A missing final
// newline in the step's own output is the caller's to add.
func StepFooter(s api.Step, d time.Duration) string {
	out := "── " + s.State
	if s.ExitCode != nil {
		out += fmt.Sprintf(", exit %d", *s.ExitCode)
	}
	if s.Reason != "" && s.Reason != api.ReasonExitCode && s.Reason != s.State {
		out += ", " + s.Reason
	}
	if d > 0 {
		out += fmt.Sprintf(", %s", d.Round(10*time.Millisecond))
	}
	return out + " ──\n"
}

// RunSummary is the last line for a run, e.g.
// "run 42 (ci): failed, exit-code, exit 1: step 2 (test) exited with 1".
// A reason equal to the state ("cancelled") is left out; a retry says its
// attempt ("run 43 (ci, attempt 2): ...") and a retried run the run that
// retries it ("...; retried as run 43").
func RunSummary(r api.Run) string {
	name := r.Workflow
	if r.Attempt > 1 {
		name += fmt.Sprintf(", attempt %d", r.Attempt)
	}
	out := fmt.Sprintf("run %d (%s): %s", r.ID, name, r.State)
	if r.Reason != "" && r.Reason != r.State {
		out += ", " + r.Reason
	}
	if r.ExitCode != nil {
		out += fmt.Sprintf(", exit %d", *r.ExitCode)
	}
	if r.Message != "" {
		out += ": " + r.Message
	}
	if r.RetriedBy != 0 {
		out += fmt.Sprintf("; retried as run %d", r.RetriedBy)
	}
	return out + "\n"
}

// SetupState is the state word shown for the setup log (step 0) of a run in
// runState, given the state the runner reported for it (stepState, "" when
// none): SetupDone when setup got through; when setup is where the run
// ended, the run's own final state ("errored" for an invalid workflow or a
// failed checkout, "failed" for a timeout, "cancelled"), so that the
// setup footer and the run's summary use the same word. The API keeps
// reporting the step as api.StepFailed: only the display differs.
func SetupState(stepState, runState string) string {
	switch stepState {
	case api.StepFailed, api.StepErrored, api.StepCancelled:
		if api.IsFinal(runState) && runState != api.StateSucceeded {
			return runState
		}
		return stepState
	}
	return SetupDone
}
