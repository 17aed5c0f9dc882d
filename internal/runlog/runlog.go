// Package runlog renders a run's logs for people: the lines that frame each
// step's output. `knotless run logs` and `knotless-run exec` both use it, so
// a run looks the same on a server and locally. It never alters step bytes.
package runlog

import (
	"fmt"
	"time"

	"knotless.dev/knotless/internal/api"
)

// StepHeader is printed before a step's log, e.g. "── step 1/3: build ──\n".
// total is the number of workflow steps; index 0 is the setup log.
func StepHeader(index, total int, name string) string {
	if index == api.SetupStep {
		return "── setup ──\n"
	}
	return fmt.Sprintf("── step %d/%d: %s ──\n", index, total, name)
}

// StepFooter is printed after a step's log: its state, exit code, reason and
// duration (0 = unknown, omitted). A missing final newline in the step's own
// output is the caller's to add.
func StepFooter(s api.Step, d time.Duration) string {
	out := "── " + s.State
	if s.ExitCode != nil {
		out += fmt.Sprintf(", exit %d", *s.ExitCode)
	}
	if s.Reason != "" && s.Reason != api.ReasonExitCode {
		out += ", " + s.Reason
	}
	if d > 0 {
		out += fmt.Sprintf(", %s", d.Round(10*time.Millisecond))
	}
	return out + " ──\n"
}

// RunSummary is the last line for a run, e.g.
// "run 42 (ci): failed, exit-code, exit 1".
func RunSummary(r api.Run) string {
	out := fmt.Sprintf("run %d (%s): %s", r.ID, r.Workflow, r.State)
	if r.Reason != "" {
		out += ", " + r.Reason
	}
	if r.ExitCode != nil {
		out += fmt.Sprintf(", exit %d", *r.ExitCode)
	}
	if r.Message != "" {
		out += ": " + r.Message
	}
	return out + "\n"
}
