package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testwait"
)

// pushMany pushes n workflows selected by any push in one push (extra
// goes into each, e.g. a concurrency group) and returns their queued runs,
// oldest first.
func pushMany(t *testing.T, f *fixture, n int, extra string) []api.Run {
	t.Helper()
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf(".knotless/workflows/w%03d.yml", i)] = queuedWorkflow(extra)
	}
	f.push(t, servertest.WorkTree(t, files), "main")
	runs := f.runs(t)
	if len(runs) != n {
		t.Fatalf("runs after the push: %d, want %d", len(runs), n)
	}
	slices.Reverse(runs)
	return runs
}

// claimMax claims up to max runs (ClaimInput.Max) with r, waiting up to
// wait seconds, and returns the whole answer.
func claimMax(t *testing.T, r *servertest.Runner, wait, max int) api.ClaimOutput {
	t.Helper()
	var out api.ClaimOutput
	if err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: wait, Max: max}, &out); err != nil {
		t.Fatalf("claim of %d by %s: %v", max, r.Name, err)
	}
	return out
}

func runIDs(runs []*api.ClaimedRun) []int64 {
	ids := make([]int64, 0, len(runs))
	for _, c := range runs {
		ids = append(ids, c.Run.ID)
	}
	return ids
}

// A runner with N free slots takes N queued runs in one claim. Before
// ClaimInput.Max a claim's answer was one run, so a runner of capacity 100
// took a burst of 100 queued runs in 100 claims in a row: the 100 "claimed
// run" lines of a kube burst spread over 6 s (24 ms apart at the median,
// up to 565 ms).
func TestClaim_MaxClaimsThatManyQueuedRunsInOneAnswerEachUnderItsOwnLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	queued := pushMany(t, f, 5, "")

	out := claimMax(t, r, 0, 3)
	if out.Run != nil {
		t.Errorf("answer to a claim with Max has Run %d; want the runs in Runs only", out.Run.Run.ID)
	}
	want := []int64{queued[0].ID, queued[1].ID, queued[2].ID}
	if got := runIDs(out.Runs); !slices.Equal(got, want) {
		t.Fatalf("claim of 3 of 5 queued runs got %v, want the 3 oldest %v", got, want)
	}
	tokens := map[string]bool{}
	for _, c := range out.Runs {
		tokens[c.RunToken] = true
		if c.LeaseSeconds <= 0 || c.WorkflowSource == "" || c.GitURL == "" {
			t.Errorf("run %d handed over without lease, workflow or git URL: %+v", c.Run.ID, c)
		}
		got := f.WaitRun(t, c.Run.ID, 5*time.Second, func(r api.Run) bool { return r.State == api.StateClaimed })
		if got.Runner != "r1" {
			t.Errorf("run %d records runner %q, want r1", c.Run.ID, got.Runner)
		}
		// Its own lease: renewing it is a heartbeat of that run alone.
		var hb api.HeartbeatOutput
		procedure(t, r, api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, &hb)
	}
	if len(tokens) != 3 {
		t.Errorf("3 runs claimed with %d distinct run tokens, want 3", len(tokens))
	}
	// More than are queued: what is left, then nothing.
	if got, want := runIDs(claimMax(t, r, 0, 10).Runs), []int64{queued[3].ID, queued[4].ID}; !slices.Equal(got, want) {
		t.Fatalf("claim of 10 with 2 queued got %v, want %v", got, want)
	}
	if out := claimMax(t, r, 0, 10); out.Run != nil || len(out.Runs) != 0 {
		t.Fatalf("claim with nothing queued got %+v", out)
	}
}

// A claim without Max, as every runner before it sends, gets one run in
// Run, the others stay queued: an older runner keeps working.
func TestClaim_WithoutMaxClaimsOneRunInRunAsBefore(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	queued := pushMany(t, f, 3, "")
	var out api.ClaimOutput
	procedure(t, r, api.MethodClaim, api.ClaimInput{}, &out)
	if out.Run == nil || out.Run.Run.ID != queued[0].ID || len(out.Runs) != 0 {
		t.Fatalf("claim without Max: %+v, want run %d in Run alone", out, queued[0].ID)
	}
	for _, run := range queued[1:] {
		if got := f.WaitRun(t, run.ID, 5*time.Second, func(api.Run) bool { return true }); got.State != api.StateQueued {
			t.Errorf("run %d is %s after a claim without Max, want queued", run.ID, got.State)
		}
	}
}

// Claims of several, racing from several runners (each with its
// --max-claims-per-runner long polls open) for one burst, never hand one
// run to two claims: every run is claimed exactly once, by the runner it
// records. On SQLite, and on PostgreSQL with the runners spread over two
// replicas.
func TestClaim_RacingClaimsOfSeveralNeverGiveOneRunTwice(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, servertest.Options{})
		raceClaimsOfSeveral(t, f, f.Server, f.Server)
	})
	t.Run("postgres-two-replicas", func(t *testing.T) {
		t.Parallel()
		a, b := replicas(t, servertest.Options{})
		raceClaimsOfSeveral(t, a, a.Server, b)
	})
}

// raceClaimsOfSeveral registers 3 runners of f's repository, through
// servers in turn, opens every long poll they may (Max 4 each), pushes 10
// runs through f and checks that each was handed to one claim, whose
// runner it records, and all were.
func raceClaimsOfSeveral(t *testing.T, f *fixture, servers ...*servertest.Server) {
	var runners []*servertest.Runner
	for i := range 3 {
		runners = append(runners, servers[i%len(servers)].RegisterRunner(t, f.repo, fmt.Sprintf("r%d", i), nil, true))
	}
	var mu sync.Mutex
	got := map[int64][]string{} // run → the runners whose answers held it
	var wg sync.WaitGroup
	for range server.DefaultMaxClaimsPerRunner {
		for _, r := range runners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out api.ClaimOutput
				if err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: 5, Max: 4}, &out); err != nil {
					t.Errorf("claim by %s: %v", r.Name, err)
					return
				}
				if len(out.Runs) > 4 {
					t.Errorf("claim of at most 4 by %s got %d runs", r.Name, len(out.Runs))
				}
				mu.Lock()
				for _, c := range out.Runs {
					got[c.Run.ID] = append(got[c.Run.ID], r.Name)
				}
				mu.Unlock()
			}()
		}
	}
	distinct := slices.Compact(slices.Clone(servers))
	testwait.For(t, 10*time.Second, "every claim to wait", func() bool {
		n := 0
		for _, s := range distinct {
			n += s.ClaimStats().Waiting
		}
		return n == len(runners)*server.DefaultMaxClaimsPerRunner
	})
	queued := pushMany(t, f, 10, "")
	wg.Wait()
	for _, run := range queued {
		holders := got[run.ID]
		if len(holders) > 1 {
			t.Errorf("run %d was handed to %d claims (%v), want one", run.ID, len(holders), holders)
			continue
		}
		now := f.WaitRun(t, run.ID, 5*time.Second, func(api.Run) bool { return true })
		switch {
		case len(holders) == 0 && now.State != api.StateQueued:
			t.Errorf("run %d is %s by %q but no answer held it", run.ID, now.State, now.Runner)
		case len(holders) == 1 && (now.State != api.StateClaimed || now.Runner != holders[0]):
			t.Errorf("run %d is %s by %q, the answer of %s held it", run.ID, now.State, now.Runner, holders[0])
		}
	}
	if len(got) != len(queued) {
		t.Errorf("%d of %d runs claimed by 6 long polls of up to 4 runs each, want all", len(got), len(queued))
	}
}

// One claim of several runs, of one concurrency group, takes only the
// oldest: each run is claimed as if alone, so the run the group holds
// back behind the one just claimed stays queued.
func TestClaim_SeveralTakesOneRunOfAConcurrencyGroup(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	queued := pushMany(t, f, 3, "concurrency: deploy\n")
	out := claimMax(t, r, 0, 3)
	if got := runIDs(out.Runs); !slices.Equal(got, []int64{queued[0].ID}) {
		t.Fatalf("claim of 3 runs of one concurrency group got %v, want the oldest, %d, alone", got, queued[0].ID)
	}
}

// The runs of a claim of several that its runner never starts (the
// answer lost, the runner gone) are not lost: each lease lapses on its
// own and each run ends errored/runner-lost, as the run of a claim of one.
func TestClaim_SeveralRunsNeverStartedEachEndRunnerLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	pushMany(t, f, 3, "")
	out := claimMax(t, r, 0, 3)
	if len(out.Runs) != 3 {
		t.Fatalf("claim of 3 with 3 queued got %v", runIDs(out.Runs))
	}
	for _, c := range out.Runs {
		run := f.WaitRun(t, c.Run.ID, 15*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
		if run.State != api.StateErrored || run.Reason != api.ReasonRunnerLost {
			t.Errorf("run %d = %s/%s %q, want errored/runner-lost", run.ID, run.State, run.Reason, run.Message)
		}
	}
}

// A claim of several of a superseded session claims nothing: the session
// fence holds for every run of the answer.
func TestClaim_SeveralOfASupersededSessionClaimsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	old := r.Session()
	r.StartSession(t)
	queued := pushMany(t, f, 3, "")
	var out api.ClaimOutput
	err := r.ClientWithSession(old).Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Max: 3}, &out)
	if !api.IsError(err, api.ErrSessionSuperseded) {
		t.Fatalf("claim of a superseded session: %+v, %v; want SessionSuperseded", out, err)
	}
	for _, run := range queued {
		if got := f.WaitRun(t, run.ID, 5*time.Second, func(api.Run) bool { return true }); got.State != api.StateQueued {
			t.Errorf("run %d is %s after the superseded session's claim, want queued", run.ID, got.State)
		}
	}
}
