package storetest

import (
	"context"
	"errors"
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

func testListPipelines_NewestFirstInPages(t *testing.T, open Opener) {
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
	for i := 0; i < 5; i++ {
		run := store.NewRun{Workflow: "w", WorkflowPath: "w.yml", State: api.StateQueued}
		if _, _, err := db.CreatePipeline(ctx, store.NewPipeline{RepoID: repo.ID, Ref: "refs/heads/main", SHA: "abc",
			Event: "push", CreatedAt: time.Now(), Runs: []store.NewRun{run, run}}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := db.ListPipelines(ctx, repo.ID, 0, 3)
	if err != nil || len(page) != 3 || page[0].ID != 5 || page[2].ID != 3 || page[0].Repo != "alice/app" {
		t.Fatalf("first page = %+v, %v; want pipelines 5, 4, 3", page, err)
	}
	next, err := db.ListPipelines(ctx, repo.ID, page[2].ID, 3)
	if err != nil || len(next) != 2 || next[0].ID != 2 || next[1].ID != 1 {
		t.Fatalf("second page = %+v, %v; want pipelines 2, 1", next, err)
	}
	runs, err := db.RunsOfPipelines(ctx, []int64{5, 1})
	if err != nil || len(runs) != 4 {
		t.Fatalf("RunsOfPipelines(5, 1) = %d runs, %v; want 4", len(runs), err)
	}
}
