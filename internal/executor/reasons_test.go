package executor_test

import (
	"slices"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/workflow"
)

// What retry may name (workflow.RetryReasons) is every environment fault
// but unsupported: a fault that every attempt would meet again (an image
// of another architecture, arch: on a shell runner, builds not allowed) is
// errored like the others and never retried. The step's own failures and
// a cancel are neither.
func TestRetryReasons_AreTheEnvironmentFaultsThatAnotherAttemptCanMend(t *testing.T) {
	for _, r := range workflow.RetryReasons {
		if !executor.EnvironmentFault(r) || !api.IsReason(r) {
			t.Errorf("retry may name %q, which is no environment fault of api's", r)
		}
	}
	if !executor.EnvironmentFault(api.ReasonUnsupported) || slices.Contains(workflow.RetryReasons, api.ReasonUnsupported) {
		t.Errorf("unsupported: want an environment fault (errored) that retry cannot name")
	}
	for _, r := range []string{api.ReasonExitCode, api.ReasonTimeout, api.ReasonOOMKilled, api.ReasonCancelled, api.ReasonSuperseded, api.ReasonWorkflowInvalid, api.ReasonCheckout} {
		if executor.EnvironmentFault(r) || slices.Contains(workflow.RetryReasons, r) {
			t.Errorf("%s is the step's, a person's or the workflow's doing: neither an environment fault nor retried", r)
		}
	}
}
