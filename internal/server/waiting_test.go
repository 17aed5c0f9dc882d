package server_test

import (
	"context"
	"net/url"
	"regexp"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

func TestGetRun_QueuedRunNoRunnerCanTakeSaysWhy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{
		".knotless/workflows/gpu.yml":  queuedWorkflow("runners: [gpu]\n"),
		".knotless/workflows/any.yml":  queuedWorkflow(""),
		".knotless/workflows/any2.yml": queuedWorkflow(""),
	})
	f.push(t, dir, "main")
	ids := map[string]int64{}
	for _, r := range f.runs(t) {
		ids[r.WorkflowPath] = r.ID
	}
	gpu, anyRuns := ".knotless/workflows/gpu.yml", []string{".knotless/workflows/any.yml", ".knotless/workflows/any2.yml"}
	// messages reads every run's Message both through run.get and run.list
	// and fails when the two disagree.
	messages := func() map[string]string {
		t.Helper()
		listed := map[string]string{}
		var out api.ListRunsOutput
		if err := f.alice().Query(context.Background(), api.MethodListRuns, url.Values{"repo": {f.repo}}, &out); err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Runs {
			listed[r.WorkflowPath] = r.Message
		}
		got := map[string]string{}
		for path, id := range ids {
			got[path] = getRun(t, f, id).Message
			if got[path] != listed[path] {
				t.Errorf("%s: run.get says %q, run.list says %q", path, got[path], listed[path])
			}
		}
		return got
	}
	expect := func(when string, want map[string]string) {
		t.Helper()
		got := messages()
		for path, w := range want {
			if got[path] != w {
				t.Errorf("%s, %s:\n got %q\nwant %q", when, path, got[path], w)
			}
		}
	}

	noRunner := "waiting for a runner: alice/app has no approved runner (knotless-run login, then knotless runner approve)"
	expect("no runner at all", map[string]string{gpu: noRunner, anyRuns[0]: noRunner, anyRuns[1]: noRunner})

	r := f.RegisterRunner(t, f.repo, "builder-1", []string{"linux"}, false)
	awaiting := "waiting for a runner: alice/app has no approved runner; builder-1 awaits approval (knotless runner approve --repo alice/app builder-1)"
	expect("a pending runner", map[string]string{gpu: noRunner, anyRuns[0]: awaiting, anyRuns[1]: awaiting})

	if err := f.alice().Procedure(context.Background(), api.MethodApproveRunner, api.RunnerRef{Repo: f.repo, Name: "builder-1"}, nil); err != nil {
		t.Fatal(err)
	}
	noLabel := "waiting for a runner: no approved runner of alice/app has all of: gpu"
	neverSeen := "waiting for a runner: runner builder-1 qualifies but is busy or offline (never seen)"
	expect("an approved runner without label gpu", map[string]string{gpu: noLabel, anyRuns[0]: neverSeen, anyRuns[1]: neverSeen})

	r.StartSession(t)
	c := claim(t, r, 0)
	if c == nil {
		t.Fatal("builder-1 got no run")
	}
	got := messages()
	for _, path := range anyRuns {
		if ids[path] == c.Run.ID {
			if got[path] != "" {
				t.Errorf("claimed run %s has message %q, want none", path, got[path])
			}
			continue
		}
		busy := regexp.MustCompile(`^waiting for a runner: runner builder-1 qualifies but is busy or offline \(last seen \d+s ago\)$`)
		if !busy.MatchString(got[path]) {
			t.Errorf("run queued behind a busy runner, %s:\n got %q\nwant %s", path, got[path], busy)
		}
	}
}
