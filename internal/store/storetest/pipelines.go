package storetest

import (
	"context"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// A pipeline keeps the commit before the push and who pushed (migration
// 0006), and its runs carry them to the runner's claim.
func testCreatePipeline_KeepsTheCommitBeforeThePushAndTheActor(t *testing.T, open Opener) {
	db := open(t)
	repo, _ := seed(t, db, 0)
	ctx := context.Background()
	p, runs, err := db.CreatePipeline(ctx, store.NewPipeline{RepoID: repo.ID, Ref: "refs/heads/main", SHA: "def", Event: "push",
		BeforeSHA: "abc", Actor: "alice", Runs: []store.NewRun{{Workflow: "ci", WorkflowPath: ".knotless/workflows/ci.yml", State: api.StateQueued}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.BeforeSHA != "abc" || p.Actor != "alice" {
		t.Errorf("pipeline: before %q actor %q", p.BeforeSHA, p.Actor)
	}
	got, err := db.Run(ctx, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.BeforeSHA != "abc" || got.Actor != "alice" || got.Event != "push" {
		t.Errorf("run: before %q actor %q event %q", got.BeforeSHA, got.Actor, got.Event)
	}
}
