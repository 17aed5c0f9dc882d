package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

func testWebSession_ExpiredOrDeletedIsNotFound(t *testing.T, open Opener) {
	ctx := context.Background()
	db := open(t)
	now := time.Now()
	s := store.WebSession{IDHash: "id1", TokenHash: "tok", CSRF: "c", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := db.CreateWebSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := db.WebSession(ctx, "id1", now)
	if err != nil || got.TokenHash != "tok" || got.CSRF != "c" {
		t.Fatalf("WebSession = %+v, %v", got, err)
	}
	if _, err := db.WebSession(ctx, "id1", now.Add(2*time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired session: %v, want ErrNotFound", err)
	}
	if err := db.DeleteWebSession(ctx, "id1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.WebSession(ctx, "id1", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted session: %v, want ErrNotFound", err)
	}
}

// aliceApp opens a fresh store holding alice/app.
func aliceApp(t *testing.T, open Opener) (store.Store, store.Repo) {
	t.Helper()
	ctx := context.Background()
	db := open(t)
	a, err := db.CreateAccount(ctx, store.Account{Handle: "alice", DID: "did:key:a", CreatedAt: time.Now()}, "h")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := db.CreateRepo(ctx, a.ID, "app", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return db, repo
}

func testListPipelines_NewestFirstInPages(t *testing.T, open Opener) {
	ctx := context.Background()
	db, repo := aliceApp(t, open)
	for i := 0; i < 5; i++ {
		run := store.NewRun{Workflow: "w", WorkflowPath: "w.yml", State: api.StateQueued}
		if _, _, err := db.CreatePipeline(ctx, store.NewPipeline{RepoID: repo.ID, Ref: "refs/heads/main", SHA: "abc",
			Event: "push", CreatedAt: time.Now(), Runs: []store.NewRun{run, run}}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := db.ListPipelines(ctx, store.PipelineFilter{RepoID: repo.ID, Limit: 3})
	if err != nil || len(page) != 3 || page[0].ID != 5 || page[2].ID != 3 || page[0].Repo != "alice/app" {
		t.Fatalf("first page = %+v, %v; want pipelines 5, 4, 3", page, err)
	}
	next, err := db.ListPipelines(ctx, store.PipelineFilter{RepoID: repo.ID, Before: page[2].ID, Limit: 3})
	if err != nil || len(next) != 2 || next[0].ID != 2 || next[1].ID != 1 {
		t.Fatalf("second page = %+v, %v; want pipelines 2, 1", next, err)
	}
	runs, err := db.RunsOfPipelines(ctx, []int64{5, 1})
	if err != nil || len(runs) != 4 {
		t.Fatalf("RunsOfPipelines(5, 1) = %d runs, %v; want 4", len(runs), err)
	}
}

// testListPipelines_FiltersByBranchCommitStateAndWorkflow pins the
// Pipelines tab's filters (issue 25 item 3) in the store: each selects
// the pipelines that have such a run, and state and workflow together
// select a run that has both; pipelines and their runs carry the notes.
func testListPipelines_FiltersByBranchCommitStateAndWorkflow(t *testing.T, open Opener) {
	ctx := context.Background()
	db, repo := aliceApp(t, open)
	mk := func(ref, sha string, runs ...store.NewRun) int64 {
		p, _, err := db.CreatePipeline(ctx, store.NewPipeline{RepoID: repo.ID, Ref: ref, SHA: sha, Event: "push",
			CreatedAt: time.Now(), Runs: runs, Notes: []string{"note of " + sha}})
		if err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	queued := func(w string) store.NewRun {
		return store.NewRun{Workflow: w, WorkflowPath: w + ".yml", State: api.StateQueued}
	}
	errored := func(w string) store.NewRun {
		return store.NewRun{Workflow: w, WorkflowPath: w + ".yml", State: api.StateErrored, Reason: api.ReasonWorkflowInvalid}
	}
	p1 := mk("refs/heads/main", "a1", queued("ci"), errored("lint"))
	p2 := mk("refs/heads/dev", "b2", errored("ci"))
	p3 := mk("refs/heads/main", "c3", queued("ci"))
	ids := func(f store.PipelineFilter) []int64 {
		f.RepoID = repo.ID
		ps, err := db.ListPipelines(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, p := range ps {
			out = append(out, p.ID)
			if len(p.Notes) != 1 || p.Notes[0] != "note of "+p.SHA {
				t.Errorf("pipeline %d notes %q", p.ID, p.Notes)
			}
		}
		return out
	}
	for _, c := range []struct {
		f    store.PipelineFilter
		want []int64
	}{
		{store.PipelineFilter{}, []int64{p3, p2, p1}},
		{store.PipelineFilter{Ref: "refs/heads/main"}, []int64{p3, p1}},
		{store.PipelineFilter{SHA: "b2"}, []int64{p2}},
		{store.PipelineFilter{State: api.StateErrored}, []int64{p2, p1}},
		{store.PipelineFilter{Workflow: "lint"}, []int64{p1}},
		{store.PipelineFilter{State: api.StateErrored, Workflow: "ci"}, []int64{p2}},
		{store.PipelineFilter{State: api.StateErrored, Ref: "refs/heads/main"}, []int64{p1}},
		{store.PipelineFilter{State: api.StateSucceeded}, nil},
	} {
		if got := ids(c.f); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("ListPipelines(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	runs, err := db.RunsOfPipelines(ctx, []int64{p1})
	if err != nil || len(runs) != 2 || len(runs[0].Notes) != 1 {
		t.Fatalf("runs of pipeline %d: %+v, %v; want them with the pipeline's notes", p1, runs, err)
	}
	ws, err := db.RunWorkflows(ctx, repo.ID, 10)
	if err != nil || fmt.Sprint(ws) != "[ci lint]" {
		t.Fatalf("RunWorkflows = %q, %v", ws, err)
	}
}

// testRunnerProcess_KeepsDigestCapacityAndFacts: what a runner's process
// said of itself comes back whole (the Runners tab shows it).
func testRunnerProcess_KeepsDigestCapacityAndFacts(t *testing.T, open Opener) {
	ctx := context.Background()
	db, repo := aliceApp(t, open)
	x, _, err := db.RegisterRunner(ctx, store.Runner{RepoID: repo.ID, Name: "r1", DID: "did:key:r1", PublicKey: "z", Status: api.RunnerApproved,
		CreatedAt: time.Now()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := store.RunnerProcess{RunnerID: x.ID, Executor: "kube", Version: "v1", Digest: "ab12", Capacity: 3,
		Facts: map[string]string{"namespace": "ci", "pod": "runner-0"}, StartedAt: time.UnixMilli(time.Now().UnixMilli())}
	if err := db.SetRunnerProcess(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := db.RunnerProcesses(ctx, repo.ID)
	if err != nil || fmt.Sprint(got[x.ID]) != fmt.Sprint(want) {
		t.Fatalf("RunnerProcesses = %+v, %v; want %+v", got[x.ID], err, want)
	}
}
