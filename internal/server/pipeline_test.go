package server_test

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

var threeWorkflows = map[string]string{
	"README": "app\n",
	// Selected by pushes to main only.
	".knotless/workflows/ci.yml": "name: ci\non:\n  push:\n    branches: [main]\nsteps:\n  - run: echo ci\n",
	// Selected by tags only.
	".knotless/workflows/release.yaml": "name: release\non:\n  push:\n    branches: []\n    tags: [\"v*\"]\nsteps:\n  - run: echo release\n",
	// Broken: an unknown key at line 3, column 1.
	".knotless/workflows/broken.yml": "on:\n  push: {}\nstpes:\n  - run: echo broken\n",
	// Not a workflow file: ignored.
	".knotless/workflows/notes.txt": "not yaml\n",
}

func TestPush_CreatesRunsForMatchingWorkflowsAndErroredRunForBrokenOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, threeWorkflows)
	f.push(t, dir, "main")

	runs := f.runs(t)
	if len(runs) != 2 {
		t.Fatalf("got %d runs, want 2 (ci and the broken one): %+v", len(runs), runs)
	}
	m := byWorkflow(runs)
	ci, ok := m[".knotless/workflows/ci.yml"]
	if !ok || ci.State != api.StateQueued || ci.Workflow != "ci" || ci.Ref != "refs/heads/main" || ci.Event != "push" {
		t.Errorf("ci run = %+v, want queued ci on refs/heads/main (push)", ci)
	}
	head := servertest.Git(t, dir, "rev-parse", "HEAD")
	if ci.SHA != head {
		t.Errorf("ci run SHA %s, want %s", ci.SHA, head)
	}
	broken, ok := m[".knotless/workflows/broken.yml"]
	if !ok || broken.State != api.StateErrored || broken.Reason != api.ReasonWorkflowInvalid {
		t.Fatalf("broken run = %+v, want errored/%s", broken, api.ReasonWorkflowInvalid)
	}
	if broken.Pipeline != ci.Pipeline {
		t.Errorf("runs of one push in pipelines %d and %d, want one pipeline", ci.Pipeline, broken.Pipeline)
	}
	log := f.runLog(t, broken.ID, api.SetupStep)
	if !regexp.MustCompile(`(?m)^\.knotless/workflows/broken\.yml:3:1: .*stpes`).MatchString(log) {
		t.Errorf("setup log of the broken run lacks FILE:LINE:COL naming the bad key:\n%s", log)
	}
	if !regexp.MustCompile(`^\.knotless/workflows/broken\.yml:\d+:\d+: `).MatchString(broken.Message) {
		t.Errorf("broken run message %q does not start with FILE:LINE:COL", broken.Message)
	}
	var got api.Run
	if err := f.alice().Query(context.Background(), api.MethodGetRun, url.Values{"run": {itoa(broken.ID)}}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Steps) != 1 || got.Steps[0].Index != 0 || got.Steps[0].LogSize != int64(len(log)) {
		t.Errorf("broken run steps = %+v, want the setup step with its log size %d", got.Steps, len(log))
	}
}

func TestPush_TagTriggersOnlyTagWorkflow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{
		".knotless/workflows/ci.yml":       threeWorkflows[".knotless/workflows/ci.yml"],
		".knotless/workflows/release.yaml": threeWorkflows[".knotless/workflows/release.yaml"],
	})
	servertest.Git(t, dir, "tag", "-a", "-m", "v1", "v1.0.0") // annotated: the server must peel it
	f.push(t, dir, "refs/tags/v1.0.0")

	runs := f.runs(t)
	if len(runs) != 1 {
		t.Fatalf("got %d runs, want only the release run: %+v", len(runs), runs)
	}
	r := runs[0]
	head := servertest.Git(t, dir, "rev-parse", "HEAD")
	if r.WorkflowPath != ".knotless/workflows/release.yaml" || r.Event != "tag" || r.Ref != "refs/tags/v1.0.0" || r.SHA != head {
		t.Errorf("run = %+v; want release.yaml, event tag, refs/tags/v1.0.0 at commit %s", r, head)
	}
}

func TestPush_BranchFilterExcludesOtherBranch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{
		".knotless/workflows/ci.yml":  threeWorkflows[".knotless/workflows/ci.yml"],
		".knotless/workflows/any.yml": queuedWorkflow(""),
	})
	servertest.Git(t, dir, "checkout", "-q", "-b", "feature/x")
	f.push(t, dir, "feature/x")
	runs := f.runs(t)
	if len(runs) != 1 || runs[0].WorkflowPath != ".knotless/workflows/any.yml" || runs[0].Ref != "refs/heads/feature/x" {
		t.Fatalf("runs = %+v, want only any.yml on refs/heads/feature/x", runs)
	}
}

func TestPush_NoMatchingWorkflowMakesNoPipeline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{
		".knotless/workflows/rel.yml": "on:\n  push:\n    branches: [\"release/*\"]\nsteps:\n  - run: echo\n",
	})
	f.push(t, dir, "main")
	servertest.Git(t, dir, "checkout", "-q", "-b", "dev")
	f.push(t, dir, "dev")
	// Deleting a branch makes nothing either.
	f.push(t, dir, ":dev")
	if runs := f.runs(t); len(runs) != 0 {
		t.Fatalf("runs = %+v, want none", runs)
	}
}

func TestPush_EachUpdatedRefGetsItsOwnPipeline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/any.yml": queuedWorkflow("")})
	servertest.Git(t, dir, "branch", "second")
	f.push(t, dir, "main", "second")
	runs := f.runs(t)
	if len(runs) != 2 || runs[0].Pipeline == runs[1].Pipeline {
		t.Fatalf("runs = %+v, want two runs in two pipelines", runs)
	}
}

func TestTrigger_ManualPipelineForDefaultBranch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{
		".knotless/workflows/manual.yml": "on:\n  manual: {}\nsteps:\n  - run: echo m\n",
		".knotless/workflows/ci.yml":     threeWorkflows[".knotless/workflows/ci.yml"],
	})
	f.push(t, dir, "main") // ci runs; manual.yml does not
	ctx := context.Background()
	var p api.Pipeline
	if err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Event != "manual" || p.Ref != "refs/heads/main" || len(p.Runs) != 1 || p.Runs[0].WorkflowPath != ".knotless/workflows/manual.yml" {
		t.Fatalf("pipeline = %+v; want one manual run of manual.yml on refs/heads/main", p)
	}
	// By name, and by file name.
	for _, wf := range []string{"manual", "manual.yml", ".knotless/workflows/manual.yml"} {
		if err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo, Ref: "main", Workflow: wf}, &p); err != nil {
			t.Errorf("trigger workflow %q: %v", wf, err)
		}
	}
	// A workflow without on.manual, an unknown workflow, an unknown ref.
	err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo, Workflow: "ci"}, nil)
	if !api.IsError(err, api.ErrInvalidRequest) || !strings.Contains(err.Error(), "manual") {
		t.Errorf("trigger of a push-only workflow: err = %v, want InvalidRequest naming manual", err)
	}
	if err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo, Workflow: "nope"}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Errorf("trigger of an unknown workflow: err = %v, want NotFound", err)
	}
	if err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo, Ref: "nope"}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Errorf("trigger of an unknown ref: err = %v, want NotFound", err)
	}
	// Someone else may not trigger alice's pipelines.
	bob := f.Client(f.CreateAccount(t, "bob"))
	if err := bob.Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Errorf("trigger by another account: err = %v, want NotFound", err)
	}
}
