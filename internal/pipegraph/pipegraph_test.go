package pipegraph

import (
	"testing"

	"knotless.dev/knotless/internal/api"
)

func mv(v string) []api.MatrixValue { return []api.MatrixValue{{Name: "os", Value: v}} }

// A build, a 2-run matrix needing it (one run retried), and a report
// needing the matrix: three stages, the retry in its first attempt's slot.
func TestLayout_StagesByNeedsGroupsByFileAttemptsInOrder(t *testing.T) {
	const b, m, r = ".knotless/workflows/build.yml", ".knotless/workflows/test.yml", ".knotless/workflows/report.yml"
	runs := []api.Run{
		{ID: 5, WorkflowPath: r, Workflow: "report", State: api.StateQueued, Needs: []api.Need{{Run: 2, Name: "test"}, {Run: 6, Name: "test"}}},
		{ID: 1, WorkflowPath: b, Workflow: "build", State: api.StateSucceeded},
		{ID: 2, WorkflowPath: m, Workflow: "test (linux)", Matrix: mv("linux"), State: api.StateSucceeded, Needs: []api.Need{{Run: 1, Name: "build"}}},
		{ID: 3, WorkflowPath: m, Workflow: "test (arm)", Matrix: mv("arm"), State: api.StateErrored, RetriedBy: 6, Attempt: 1, Needs: []api.Need{{Run: 1, Name: "build"}}},
		{ID: 6, WorkflowPath: m, Workflow: "test (arm)", Matrix: mv("arm"), State: api.StateRunning, RetryOf: 3, Attempt: 2, Needs: []api.Need{{Run: 1, Name: "build"}}},
	}
	gs := Layout(runs)
	if len(gs) != 3 {
		t.Fatalf("%d groups, want 3: %+v", len(gs), gs)
	}
	if gs[0].Name != "build" || gs[0].Stage != 1 || gs[1].Name != "test" || gs[1].Stage != 2 || !gs[1].Matrix || gs[2].Name != "report" || gs[2].Stage != 3 {
		t.Errorf("groups: %s/%d %s/%d %s/%d", gs[0].Name, gs[0].Stage, gs[1].Name, gs[1].Stage, gs[2].Name, gs[2].Stage)
	}
	test := gs[1]
	if len(test.Slots) != 2 || len(test.Slots[1].Attempts) != 2 || test.Slots[1].Current().ID != 6 {
		t.Errorf("test's slots: %+v", test.Slots)
	}
	if test.Summary() != "1 succeeded, 1 running" || test.State() != api.StateRunning {
		t.Errorf("summary %q state %s", test.Summary(), test.State())
	}
	if len(gs[2].Needs) != 1 || gs[2].Needs[0] != "test" || Label(test.Slots[0].Current()) != "linux" {
		t.Errorf("report needs %v; label %q", gs[2].Needs, Label(test.Slots[0].Current()))
	}
}
