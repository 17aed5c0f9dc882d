package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// graphRun is one run graphPipeline creates: its workflow (path names
// it), its matrix value ("" for none), the indexes of the runs it needs,
// its retry maximum (on evicted and runner-lost), fail-fast, and a final
// state to create it in ("" for queued).
type graphRun struct {
	path   string
	value  string
	needs  []int
	retry  int
	ff     bool
	state  string
	reason string
}

// graphPipeline creates one pipeline of runs in repo and returns them.
func graphPipeline(t *testing.T, db store.Store, repo store.Repo, runs ...graphRun) []store.Run {
	t.Helper()
	np := store.NewPipeline{RepoID: repo.ID, Ref: "refs/heads/main", SHA: "abc", Event: "push"}
	for _, g := range runs {
		nr := store.NewRun{Workflow: g.path, WorkflowPath: ".knotless/workflows/" + g.path + ".yml", Source: "src",
			State: api.StateQueued, FailFast: g.ff, Timeout: time.Hour}
		if g.state != "" {
			nr.State, nr.Reason = g.state, g.reason
		}
		if g.value != "" {
			nr.Matrix = []api.MatrixValue{{Name: "v", Value: g.value}}
			nr.Workflow += " (" + g.value + ")"
		}
		if g.retry > 0 {
			nr.RetryMax, nr.RetryWhen = g.retry, []string{api.ReasonEvicted, api.ReasonRunnerLost}
		}
		for _, i := range g.needs {
			nr.Needs = append(nr.Needs, store.NewNeed{Index: i, Name: runs[i].path})
		}
		np.Runs = append(np.Runs, nr)
	}
	_, out, err := db.CreatePipeline(context.Background(), np)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func claimFor(t *testing.T, db store.Store, x store.Runner, id int64) error {
	t.Helper()
	now := time.Now()
	_, err := db.ClaimRun(context.Background(), id, store.Claim{RunnerID: x.ID, RunnerName: x.Name,
		TokenHash: fmt.Sprint("tok", id, now.UnixNano()), Now: now, LeaseUntil: now.Add(time.Minute)})
	return err
}

// claimAndEnd claims run id for x and ends it with f (At now).
func claimAndEnd(t *testing.T, db store.Store, x store.Runner, id int64, f store.RunFinal) store.Run {
	t.Helper()
	if err := claimFor(t, db, x, id); err != nil {
		t.Fatal(err)
	}
	f.At = time.Now()
	r, err := db.CompleteRun(context.Background(), id, f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func runner(t *testing.T, db store.Store, repo store.Repo) store.Runner {
	t.Helper()
	x, _, err := db.RegisterRunner(context.Background(), store.Runner{RepoID: repo.ID, Name: "r1", DID: "did:key:r1", PublicKey: "z"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func queuedIDs(t *testing.T, db store.Store, repo store.Repo) []int64 {
	t.Helper()
	q, err := db.QueuedRuns(context.Background(), repo.ID)
	if err != nil {
		t.Fatal(err)
	}
	return ids(q)
}

func mustRun(t *testing.T, db store.Store, id int64) store.Run {
	t.Helper()
	r, err := db.Run(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A run that needs others is neither claimable nor claimed until every one
// of them succeeded; its needs are listed with their names.
func testNeeds_RunWaitsUntilEveryNeedSucceeded(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	x := runner(t, db, repo)
	runs := graphPipeline(t, db, repo, graphRun{path: "a"}, graphRun{path: "b"}, graphRun{path: "c", needs: []int{0, 1}})
	a, b, c := runs[0], runs[1], runs[2]
	if got := queuedIDs(t, db, repo); !slices.Equal(got, []int64{a.ID, b.ID}) {
		t.Fatalf("claimable %v, want a and b only", got)
	}
	if err := claimFor(t, db, x, c.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("claim of c before its needs: %v, want a conflict", err)
	}
	needs, err := db.Needs(ctx, []int64{a.ID, c.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Need{{Run: a.ID, Name: "a"}, {Run: b.ID, Name: "b"}}
	if len(needs) != 1 || !slices.Equal(needs[c.ID], want) {
		t.Errorf("needs %v, want c → %v", needs, want)
	}
	for _, r := range []store.Run{a, b} {
		claimAndEnd(t, db, x, r.ID, store.RunFinal{State: api.StateSucceeded})
		if r.ID == a.ID && slices.Contains(queuedIDs(t, db, repo), c.ID) {
			t.Fatalf("c is claimable with b still queued")
		}
	}
	if got := queuedIDs(t, db, repo); !slices.Equal(got, []int64{c.ID}) {
		t.Fatalf("claimable %v once a and b succeeded, want c", got)
	}
	if err := claimFor(t, db, x, c.ID); err != nil {
		t.Fatalf("claim of c: %v", err)
	}
}

// A need that fails skips the runs that need it, and theirs in turn, in
// the transaction that ends it, each saying which run it needed.
func testNeeds_FailedNeedSkipsDependentsTransitively(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	x := runner(t, db, repo)
	runs := graphPipeline(t, db, repo, graphRun{path: "build"}, graphRun{path: "test", needs: []int{0}},
		graphRun{path: "deploy", needs: []int{1}}, graphRun{path: "lint"})
	three := 3
	done := claimAndEnd(t, db, x, runs[0].ID, store.RunFinal{State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: &three})
	if got := ids(done.Followups); !slices.Equal(got, []int64{runs[1].ID, runs[2].ID}) {
		t.Errorf("followups %v, want test and deploy", got)
	}
	test, deploy := mustRun(t, db, runs[1].ID), mustRun(t, db, runs[2].ID)
	if test.State != api.StateSkipped || test.Reason != api.ReasonNeedFailed || test.Message != fmt.Sprintf("needs run %d (build), which ended failed (exit-code)", runs[0].ID) {
		t.Errorf("test: %s/%s %q", test.State, test.Reason, test.Message)
	}
	if deploy.State != api.StateSkipped || deploy.Message != fmt.Sprintf("needs run %d (test), which ended skipped (need-failed)", runs[1].ID) {
		t.Errorf("deploy: %s/%s %q", deploy.State, deploy.Reason, deploy.Message)
	}
	if lint := mustRun(t, db, runs[3].ID); lint.State != api.StateQueued {
		t.Errorf("lint, needing nothing: %s", lint.State)
	}
	// A need created ended (a workflow that does not parse) skips at once.
	broken := graphPipeline(t, db, repo, graphRun{path: "bad", state: api.StateErrored, reason: api.ReasonWorkflowInvalid},
		graphRun{path: "after", needs: []int{0}})
	if after := mustRun(t, db, broken[1].ID); after.State != api.StateSkipped {
		t.Errorf("run needing a broken workflow: %s, want skipped", after.State)
	}
	// A cancelled need skips too.
	more := graphPipeline(t, db, repo, graphRun{path: "a"}, graphRun{path: "b", needs: []int{0}})
	if _, err := db.CancelRun(ctx, more[0].ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if b := mustRun(t, db, more[1].ID); b.State != api.StateSkipped {
		t.Errorf("run needing a cancelled run: %s, want skipped", b.State)
	}
}

// A run that ended errored for a reason its retry: names gets a new
// attempt, queued, linked both ways, which the runs that needed the first
// need instead; it is claimable only once the first attempt's environment
// is known gone. A step's own failure or a cancel is never retried, nor
// an attempt past the maximum.
func testRetry_ErroredRunGetsANewAttemptOnceItsEnvironmentIsGone(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	x := runner(t, db, repo)
	runs := graphPipeline(t, db, repo, graphRun{path: "build", retry: 1}, graphRun{path: "test", needs: []int{0}})
	first := runs[0]
	ended := claimAndEnd(t, db, x, first.ID, store.RunFinal{State: api.StateErrored, Reason: api.ReasonEvicted})
	if len(ended.Followups) != 1 || ended.RetriedBy == 0 || ended.Followups[0].ID != ended.RetriedBy {
		t.Fatalf("ended %+v with followups %v: want one new attempt", ended, ids(ended.Followups))
	}
	second := ended.Followups[0]
	if second.State != api.StateQueued || second.Attempt != 2 || second.RetryOf != first.ID || second.Workflow != first.Workflow {
		t.Errorf("second attempt: %+v", second)
	}
	if got := queuedIDs(t, db, repo); len(got) != 0 {
		t.Fatalf("claimable %v while the first attempt's environment is not known gone", got)
	}
	if err := claimFor(t, db, x, second.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("claim of the retry before the environment is gone: %v", err)
	}
	if test := mustRun(t, db, runs[1].ID); test.State != api.StateQueued {
		t.Fatalf("the dependent of a retried run: %s, want still queued", test.State)
	}
	needs, _ := db.Needs(ctx, []int64{runs[1].ID})
	if len(needs[runs[1].ID]) != 1 || needs[runs[1].ID][0].Run != second.ID {
		t.Errorf("the dependent needs %v, want the new attempt %d", needs, second.ID)
	}
	ready, err := db.EnvironmentsGone(ctx, x.ID, 0, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(ready), []int64{second.ID}) {
		t.Errorf("EnvironmentsGone: %v, want the retry", ids(ready))
	}
	if err := claimFor(t, db, x, second.ID); err != nil {
		t.Fatalf("claim of the retry once the environment is gone: %v", err)
	}
	// The second attempt errors again: retry's maximum (1) is reached.
	last, err := db.CompleteRun(ctx, second.ID, store.RunFinal{State: api.StateErrored, Reason: api.ReasonEvicted, At: time.Now(), EnvironmentRemoved: true})
	if err != nil {
		t.Fatal(err)
	}
	if last.RetriedBy != 0 || last.EnvGoneAt == nil {
		t.Errorf("attempt 2 of a retry: {max: 1}: retried by %d, env gone %v", last.RetriedBy, last.EnvGoneAt)
	}
	if test := mustRun(t, db, runs[1].ID); test.State != api.StateSkipped {
		t.Errorf("dependent once the last attempt errored: %s, want skipped", test.State)
	}

	// Never for a step's failure, a cancel, or a reason retry: does not name.
	for _, f := range []store.RunFinal{
		{State: api.StateFailed, Reason: api.ReasonExitCode},
		{State: api.StateCancelled, Reason: api.ReasonCancelled},
		{State: api.StateErrored, Reason: api.ReasonImagePull},
	} {
		r := graphPipeline(t, db, repo, graphRun{path: "x", retry: 3})[0]
		f.EnvironmentRemoved = true
		got := claimAndEnd(t, db, x, r.ID, f)
		if got.RetriedBy != 0 || len(got.Followups) != 0 {
			t.Errorf("a run ended %s/%s was retried", f.State, f.Reason)
		}
	}
}

// A run whose runner is lost is retried, and the retry waits until the
// lost run's timeout past its start (every executor has stopped it by
// then) or until the runner's next process reports its sweep.
func testRetry_LostRunnersRetryWaitsForItsSweepOrTheTimeout(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	x := runner(t, db, repo)
	r := graphPipeline(t, db, repo, graphRun{path: "a", retry: 1})[0]
	if err := claimFor(t, db, x, r.ID); err != nil {
		t.Fatal(err)
	}
	lost, err := db.ExpireLeases(ctx, time.Now().Add(2*time.Minute))
	if err != nil || len(lost) != 1 {
		t.Fatalf("ExpireLeases: %v, %v", lost, err)
	}
	if lost[0].State != api.StateErrored || lost[0].Reason != api.ReasonRunnerLost || lost[0].RetriedBy == 0 {
		t.Fatalf("lost run: %+v", lost[0])
	}
	if gone := lost[0].EnvGoneAt; gone == nil || gone.Before(time.Now().Add(time.Hour)) {
		t.Errorf("a lost run's environment counts as gone at %v; want its timeout (1h) past its start", gone)
	}
	if got := queuedIDs(t, db, repo); len(got) != 0 {
		t.Fatalf("claimable %v before the sweep or the deadline", got)
	}
	// Another run the runner keeps (took over) stays not gone.
	ready, err := db.EnvironmentsGone(ctx, x.ID, 0, []int64{r.ID}, time.Now())
	if err != nil || len(ready) != 0 {
		t.Fatalf("EnvironmentsGone keeping the lost run: %v, %v", ids(ready), err)
	}
	if ready, err = db.EnvironmentsGone(ctx, x.ID, 0, nil, time.Now()); err != nil || !slices.Equal(ids(ready), []int64{lost[0].RetriedBy}) {
		t.Fatalf("EnvironmentsGone after the sweep: %v, %v; want the retry", ids(ready), err)
	}
}

// fail-fast: a failed run of a matrix cancels its siblings, a queued one
// at once and a running one through its runner, whose cancelled end reads
// fail-fast; without fail-fast the siblings go on.
func testFailFast_FailedMatrixRunCancelsItsSiblings(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	x := runner(t, db, repo)
	runs := graphPipeline(t, db, repo, graphRun{path: "t", value: "a", ff: true}, graphRun{path: "t", value: "b", ff: true},
		graphRun{path: "t", value: "c", ff: true}, graphRun{path: "other"})
	if err := claimFor(t, db, x, runs[1].ID); err != nil {
		t.Fatal(err)
	}
	failed := claimAndEnd(t, db, x, runs[0].ID, store.RunFinal{State: api.StateFailed, Reason: api.ReasonExitCode})
	if got := ids(failed.Followups); !slices.Equal(got, []int64{runs[1].ID, runs[2].ID}) {
		t.Errorf("followups %v, want the two siblings", got)
	}
	if c := mustRun(t, db, runs[2].ID); c.State != api.StateCancelled || c.Reason != api.ReasonFailFast {
		t.Errorf("queued sibling: %s/%s", c.State, c.Reason)
	}
	b := mustRun(t, db, runs[1].ID)
	if !b.CancelRequested || b.State != api.StateClaimed {
		t.Fatalf("claimed sibling: %+v, want a cancel request", b)
	}
	done, err := db.CompleteRun(ctx, b.ID, store.RunFinal{State: api.StateCancelled, Reason: api.ReasonCancelled, At: time.Now()})
	if err != nil || done.Reason != api.ReasonFailFast {
		t.Errorf("the claimed sibling's cancelled end: %s/%s %v, want cancelled/fail-fast", done.State, done.Reason, err)
	}
	if o := mustRun(t, db, runs[3].ID); o.State != api.StateQueued {
		t.Errorf("another workflow's run: %s", o.State)
	}
	plain := graphPipeline(t, db, repo, graphRun{path: "t", value: "a"}, graphRun{path: "t", value: "b"})
	claimAndEnd(t, db, x, plain[0].ID, store.RunFinal{State: api.StateFailed, Reason: api.ReasonExitCode})
	if s := mustRun(t, db, plain[1].ID); s.State != api.StateQueued {
		t.Errorf("sibling without fail-fast: %s, want queued", s.State)
	}
}

// Matrix values, exports and the retry settings survive the round trip.
func testCreatePipeline_KeepsMatrixRetryAndExports(t *testing.T, open Opener) {
	db := open(t)
	repo, _ := seed(t, db, 0)
	x := runner(t, db, repo)
	r := graphPipeline(t, db, repo, graphRun{path: "t", value: "linux", retry: 2, ff: true})[0]
	if len(r.Matrix) != 1 || r.Matrix[0] != (api.MatrixValue{Name: "v", Value: "linux"}) || !r.FailFast || r.RetryMax != 2 ||
		!slices.Equal(r.RetryWhen, []string{api.ReasonEvicted, api.ReasonRunnerLost}) || r.Attempt != 1 || r.Timeout != time.Hour {
		t.Errorf("created run: %+v", r)
	}
	done := claimAndEnd(t, db, x, r.ID, store.RunFinal{State: api.StateSucceeded,
		Exports: map[string]string{"VERSION": "1.2.3"}, EnvironmentRemoved: true})
	if done.Exports["VERSION"] != "1.2.3" || done.EnvGoneAt == nil {
		t.Errorf("completed run: exports %v, env gone %v", done.Exports, done.EnvGoneAt)
	}
}
