package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// replicaRuns is how many runs the replica tests race over.
const replicaRuns = 40

// Two replicas, each with several runners long-polling through it, race to
// claim every queued run: each run is claimed exactly once, and all are.
func testClaimRun_TwoReplicasClaimEachRunOnce(t *testing.T, replicas Replicas) {
	a, b := replicas(t)
	ctx := context.Background()
	repo, runs := seed(t, a, replicaRuns)
	var mu sync.Mutex
	claims := map[int64][]string{} // run → runners that claimed it
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		db := [2]store.Store{a, b}[i%2]
		name := fmt.Sprintf("r%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				queued, err := db.QueuedRuns(ctx, repo.ID)
				if err != nil {
					errs <- fmt.Errorf("%s: list queued: %w", name, err)
					return
				}
				if len(queued) == 0 {
					return
				}
				for _, r := range queued {
					now := time.Now()
					_, err := db.ClaimRun(ctx, r.ID, store.Claim{RunnerID: int64(100 + i), RunnerName: name,
						TokenHash: fmt.Sprintf("tok-%d-%s", r.ID, name), Now: now, LeaseUntil: now.Add(time.Minute)})
					if errors.Is(err, store.ErrConflict) {
						continue
					}
					if err != nil {
						errs <- fmt.Errorf("%s: claim run %d: %w", name, r.ID, err)
						return
					}
					mu.Lock()
					claims[r.ID] = append(claims[r.ID], name)
					mu.Unlock()
					break // one claim per look, as a runner does
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, r := range runs {
		if got := claims[r.ID]; len(got) != 1 {
			t.Errorf("run %d claimed by %v, want exactly one runner", r.ID, got)
		}
		for _, db := range []store.Store{a, b} {
			if got, err := db.Run(ctx, r.ID); err != nil || got.State != api.StateClaimed {
				t.Errorf("run %d after the race: %s, %v", r.ID, got.State, err)
			}
		}
	}
}

// Through one replica the runner renews the lease and reports each run's
// end while the other replica's lease sweeper finds the lease lapsed
// (its clock an hour ahead): every run ends exactly once, either as the
// runner said or as runner-lost, and a renewal never outlives the end.
func testEndRun_TwoReplicasEndEachRunOnce(t *testing.T, replicas Replicas) {
	a, b := replicas(t)
	ctx := context.Background()
	repo, runs := seed(t, a, replicaRuns)
	x := claimAll(t, a, repo, runs, time.Now().Add(time.Minute))
	var mu sync.Mutex
	ends := map[int64][]string{} // run → who ended it
	ended := func(id int64, by string) {
		mu.Lock()
		ends[id] = append(ends[id], by)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*replicaRuns+8)
	wg.Add(2)
	go func() { // the runner, through replica a
		defer wg.Done()
		for _, r := range runs {
			if _, err := a.RenewLease(ctx, r.ID, x.ID, time.Now().Add(time.Minute)); err != nil && !errors.Is(err, store.ErrRunFinished) {
				errs <- fmt.Errorf("renew run %d: %w", r.ID, err)
			}
			zero := 0
			_, err := a.CompleteRun(ctx, r.ID, store.RunFinal{State: api.StateSucceeded, ExitCode: &zero, At: time.Now()})
			switch {
			case err == nil:
				ended(r.ID, "runner")
			case !errors.Is(err, store.ErrRunFinished):
				errs <- fmt.Errorf("complete run %d: %w", r.ID, err)
			}
		}
	}()
	go func() { // the sweeper, through replica b
		defer wg.Done()
		for range 50 {
			lost, err := b.ExpireLeases(ctx, time.Now().Add(time.Hour))
			if err != nil {
				errs <- fmt.Errorf("expire leases: %w", err)
				return
			}
			for _, r := range lost {
				ended(r.ID, "sweeper")
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	lost, err := b.ExpireLeases(ctx, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range lost {
		ended(r.ID, "sweeper")
	}
	for _, r := range runs {
		got, err := b.Run(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		by := ends[r.ID]
		if len(by) != 1 {
			t.Errorf("run %d ended by %v, want exactly once", r.ID, by)
			continue
		}
		want := map[string]string{"runner": api.StateSucceeded, "sweeper": api.StateErrored}[by[0]]
		if got.State != want || got.LeaseExpires != nil {
			t.Errorf("run %d ended by the %s: state %s, lease %v; want %s and no lease", r.ID, by[0], got.State, got.LeaseExpires, want)
		}
		if _, err := a.RunByToken(ctx, fmt.Sprint("tok", r.ID)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("run %d's token still works after its end: %v", r.ID, err)
		}
	}
}
