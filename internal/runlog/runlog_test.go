package runlog

import (
	"testing"

	"knotless.dev/knotless/internal/api"
)

func ptr(n int) *int { return &n }

func TestStepFooter_ReasonEqualToStateIsNotRepeated(t *testing.T) {
	for _, c := range []struct {
		step api.Step
		want string
	}{
		{api.Step{State: api.StepCancelled, ExitCode: ptr(143), Reason: api.ReasonCancelled}, "── cancelled, exit 143 ──\n"},
		{api.Step{State: api.StepFailed, ExitCode: ptr(3), Reason: api.ReasonExitCode}, "── failed, exit 3 ──\n"},
		{api.Step{State: api.StepFailed, Reason: api.ReasonTimeout}, "── failed, timeout ──\n"},
		{api.Step{State: api.StepCancelled, Reason: api.ReasonRunnerStopped}, "── cancelled, runner-stopped ──\n"},
		{api.Step{State: api.StepSucceeded, ExitCode: ptr(0)}, "── succeeded, exit 0 ──\n"},
	} {
		if got := StepFooter(c.step, 0); got != c.want {
			t.Errorf("StepFooter(%+v) = %q, want %q", c.step, got, c.want)
		}
	}
}

func TestRunSummary_ReasonEqualToStateIsNotRepeated(t *testing.T) {
	for _, c := range []struct {
		run  api.Run
		want string
	}{
		{api.Run{ID: 5, Workflow: "long", State: api.StateCancelled, Reason: api.ReasonCancelled}, "run 5 (long): cancelled\n"},
		{api.Run{ID: 5, Workflow: "long", State: api.StateCancelled, Reason: api.ReasonRunnerStopped, Message: "m"}, "run 5 (long): cancelled, runner-stopped: m\n"},
		{api.Run{ID: 6, Workflow: "ci", State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: ptr(1)}, "run 6 (ci): failed, exit-code, exit 1\n"},
		{api.Run{ID: 7, Workflow: "ci", State: api.StateSucceeded}, "run 7 (ci): succeeded\n"},
	} {
		if got := RunSummary(c.run); got != c.want {
			t.Errorf("RunSummary(%+v) = %q, want %q", c.run, got, c.want)
		}
	}
}

func TestSetupState_MatchesTheRunWhenSetupEndedIt(t *testing.T) {
	for _, c := range []struct{ step, run, want string }{
		{api.StepSucceeded, api.StateRunning, SetupDone},
		{"", api.StateSucceeded, SetupDone},
		{api.StepRunning, api.StateRunning, SetupDone},
		{api.StepFailed, api.StateErrored, "errored"},
		{api.StepFailed, api.StateFailed, "failed"},
		{api.StepCancelled, api.StateCancelled, "cancelled"},
		{api.StepFailed, api.StateRunning, "failed"}, // the run's result is not in yet
	} {
		if got := SetupState(c.step, c.run); got != c.want {
			t.Errorf("SetupState(%q, %q) = %q, want %q", c.step, c.run, got, c.want)
		}
	}
}
