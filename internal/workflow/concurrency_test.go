package workflow

import "testing"

func TestConcurrency_GroupExpandsRefAndWorkflowAndShorthandIsAGroup(t *testing.T) {
	wf, err := Parse("ci.yml", []byte("name: ci\nconcurrency:\n  group: \"{{ workflow }}-{{ ref_name }}/{{ref}}@{{ event }}\"\n  cancel-in-progress: true\nsteps: [{run: x}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !wf.Concurrency.CancelInProgress {
		t.Error("cancel-in-progress not read")
	}
	if got := wf.Concurrency.GroupFor("refs/heads/main", "ci", "push"); got != "ci-main/refs/heads/main@push" {
		t.Errorf("group %q", got)
	}
	wf, err = Parse("ci.yml", []byte("concurrency: deploy\nsteps: [{run: x}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if wf.Concurrency.CancelInProgress || wf.Concurrency.GroupFor("refs/tags/v1", "ci", "push") != "deploy" {
		t.Errorf("shorthand: %+v", wf.Concurrency)
	}
	wf, _ = Parse("ci.yml", []byte("steps: [{run: x}]\n"))
	if wf.Concurrency != nil || wf.Concurrency.GroupFor("refs/heads/main", "ci", "push") != "" {
		t.Error("no concurrency: want no group")
	}
}
