package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// seed makes account alice, repo alice/app and a pipeline of n queued runs.
func seed(t *testing.T, db store.Store, n int) (store.Repo, []store.Run) {
	t.Helper()
	ctx := context.Background()
	a, err := db.CreateAccount(ctx, store.Account{Handle: "alice", DID: "did:key:alice"}, "hash-alice")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := db.CreateRepo(ctx, a.ID, "app", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	np := store.NewPipeline{RepoID: repo.ID, Ref: "refs/heads/main", SHA: "abc", Event: "push"}
	for i := 0; i < n; i++ {
		np.Runs = append(np.Runs, store.NewRun{Workflow: fmt.Sprint("w", i), WorkflowPath: fmt.Sprintf(".knotless/workflows/w%d.yml", i),
			Source: "src", Secrets: []string{"A"}, Runners: []string{"linux"}, State: api.StateQueued})
	}
	_, runs, err := db.CreatePipeline(ctx, np)
	if err != nil {
		t.Fatal(err)
	}
	return repo, runs
}

func testAccounts_UniqueHandleAndTokenLookup(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	seed(t, db, 0)
	if _, err := db.CreateAccount(ctx, store.Account{Handle: "alice", DID: "did:key:other"}, "h2"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate handle: err = %v, want ErrConflict", err)
	}
	if _, err := db.AccountByToken(ctx, "nope", time.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown token: err = %v, want ErrNotFound", err)
	}
	a, err := db.AccountByToken(ctx, "hash-alice", time.Now())
	if err != nil || a.Handle != "alice" {
		t.Fatalf("AccountByToken = %+v, %v", a, err)
	}
	if _, err := db.CreateRepo(ctx, a.ID, "app", time.Now()); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate repo: err = %v, want ErrConflict", err)
	}
}

func testClaimRun_ConcurrentClaimsOneWins(t *testing.T, open Opener) {
	db := open(t)
	_, runs := seed(t, db, 1)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := time.Now()
			_, err := db.ClaimRun(context.Background(), runs[0].ID, store.Claim{RunnerID: int64(i + 1),
				RunnerName: fmt.Sprint("r", i), TokenHash: fmt.Sprint("tok", i), Now: now, LeaseUntil: now.Add(time.Minute)})
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("claim: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d claims won, want 1", wins.Load())
	}
	r, _ := db.Run(context.Background(), runs[0].ID)
	if r.State != api.StateClaimed || r.RunnerID == 0 || r.LeaseExpires == nil {
		t.Fatalf("claimed run = %+v", r)
	}
	if got, err := db.RunByToken(context.Background(), fmt.Sprint("tok", r.RunnerID-1)); err != nil || got.ID != r.ID {
		t.Fatalf("RunByToken = %+v, %v", got, err)
	}
}

func testCompleteRun_OnceAndClearsToken(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	_, runs := seed(t, db, 1)
	now := time.Now()
	if _, err := db.ClaimRun(ctx, runs[0].ID, store.Claim{RunnerID: 1, RunnerName: "r", TokenHash: "t", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	two := 2
	f := store.RunFinal{State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: &two}
	if _, err := db.CompleteRun(ctx, runs[0].ID, f); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompleteRun(ctx, runs[0].ID, f); err != nil {
		t.Fatalf("same result again: %v", err)
	}
	if _, err := db.CompleteRun(ctx, runs[0].ID, store.RunFinal{State: api.StateSucceeded}); !errors.Is(err, store.ErrRunFinished) {
		t.Fatalf("different result: err = %v, want ErrRunFinished", err)
	}
	if _, err := db.RunByToken(ctx, "t"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("token of a final run still resolves: %v", err)
	}
	if _, err := db.RenewLease(ctx, runs[0].ID, 1, time.Now()); !errors.Is(err, store.ErrRunFinished) {
		t.Fatalf("renew of a final run: err = %v, want ErrRunFinished", err)
	}
}

func testExpireLeases_LapsedRunsEndWithReason(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, runs := seed(t, db, 3)
	x, _, err := db.RegisterRunner(ctx, store.Runner{RepoID: repo.ID, Name: "r1", DID: "did:key:r1", PublicKey: "z"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Minute)
	for i, until := range []time.Time{past, past, future} {
		if _, err := db.ClaimRun(ctx, runs[i].ID, store.Claim{RunnerID: x.ID, RunnerName: "r1", TokenHash: fmt.Sprint(i), Now: past, LeaseUntil: until}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.CancelRun(ctx, runs[1].ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	lost, err := db.ExpireLeases(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(lost) != 2 {
		t.Fatalf("%d runs expired, want 2", len(lost))
	}
	if lost[0].State != api.StateErrored || lost[0].Reason != api.ReasonRunnerLost {
		t.Errorf("lapsed run = %s/%s, want errored/runner-lost", lost[0].State, lost[0].Reason)
	}
	if lost[1].State != api.StateCancelled || lost[1].Reason != api.ReasonCancelled {
		t.Errorf("lapsed cancel-requested run = %s/%s, want cancelled/cancelled", lost[1].State, lost[1].Reason)
	}
	// ExtendLeases revives nothing final and covers the active one.
	n, err := db.ExtendLeases(ctx, future.Add(time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("ExtendLeases = %d, %v; want 1", n, err)
	}
}

func testRegisterRunner_NameAndDIDAreUnique(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	x, created, err := db.RegisterRunner(ctx, store.Runner{RepoID: repo.ID, Name: "r1", DID: "did:key:a", PublicKey: "z", Labels: []string{"l"}}, 0)
	if err != nil || !created || x.Status != api.RunnerPending {
		t.Fatalf("register = %+v, %v, %v", x, created, err)
	}
	if _, created, err := db.RegisterRunner(ctx, store.Runner{RepoID: repo.ID, Name: "r1", DID: "did:key:a", PublicKey: "z"}, 0); err != nil || created {
		t.Fatalf("same again: created %v, err %v; want idempotent", created, err)
	}
	if _, _, err := db.RegisterRunner(ctx, store.Runner{RepoID: repo.ID, Name: "r1", DID: "did:key:b", PublicKey: "z"}, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("name taken by another DID: err = %v, want ErrConflict", err)
	}
	if _, _, err := db.RegisterRunner(ctx, store.Runner{RepoID: repo.ID, Name: "r2", DID: "did:key:a", PublicKey: "z"}, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("DID under a second name: err = %v, want ErrConflict", err)
	}
	if x, err = db.ApproveRunner(ctx, x.ID); err != nil || x.Status != api.RunnerApproved {
		t.Fatalf("approve = %+v, %v", x, err)
	}
	if _, err := db.RemoveRunner(ctx, x.ID, "admin", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RunnerByDID(ctx, "did:key:a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("removed runner: err = %v, want ErrNotFound", err)
	}
}

func testSecrets_ScopesAndListWithoutCiphertext(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	for _, s := range []store.Secret{
		{RepoID: repo.ID, Name: "A", Ciphertext: []byte("c1")},
		{RepoID: repo.ID, Name: "A", Runner: "r1", Ciphertext: []byte("c2")},
		{RepoID: repo.ID, Name: "B", Ciphertext: []byte("c3")},
	} {
		if err := db.SetSecret(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	list, err := db.ListSecrets(ctx, repo.ID)
	if err != nil || len(list) != 3 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	for _, s := range list {
		if s.Ciphertext != nil {
			t.Errorf("ListSecrets returned a ciphertext for %s", s.Name)
		}
	}
	got, err := db.SecretsFor(ctx, repo.ID, []string{"A"})
	if err != nil || len(got) != 2 || string(got[0].Ciphertext) != "c1" || string(got[1].Ciphertext) != "c2" {
		t.Fatalf("SecretsFor(A) = %+v, %v", got, err)
	}
	if err := db.DeleteSecret(ctx, repo.ID, "A", "r1"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteSecret(ctx, repo.ID, "A", "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: err = %v, want ErrNotFound", err)
	}
}

func testUpdateStep_StartsRunAndNeverRegressesFinalStep(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	_, runs := seed(t, db, 1)
	id := runs[0].ID
	now := time.Now()
	if _, err := db.ClaimRun(ctx, id, store.Claim{RunnerID: 1, RunnerName: "r", TokenHash: "t", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	r, err := db.UpdateStep(ctx, id, store.Step{Index: 1, Name: "build", State: api.StepRunning})
	if err != nil || r.State != api.StateRunning || r.StartedAt == nil {
		t.Fatalf("after first running step: %+v, %v", r, err)
	}
	zero := 0
	if _, err := db.UpdateStep(ctx, id, store.Step{Index: 1, State: api.StepSucceeded, ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateStep(ctx, id, store.Step{Index: 1, State: api.StepRunning}); err != nil {
		t.Fatal(err)
	}
	steps, err := db.Steps(ctx, id)
	if err != nil || len(steps) != 1 || steps[0].State != api.StepSucceeded || steps[0].Name != "build" || steps[0].ExitCode == nil {
		t.Fatalf("steps = %+v, %v; want build succeeded with exit 0", steps, err)
	}
}
