package server

import (
	"testing"

	"knotless.dev/knotless/internal/store"
)

func woken(w *claimWaiter) bool {
	select {
	case <-w.wake:
		w.wake <- struct{}{} // leave it for the waiter
		return true
	default:
		return false
	}
}

func TestClaimWaiters_QueuedRunWakesOneQualifyingWaiterAndPassesOnWhenNotTaken(t *testing.T) {
	s := &Server{claims: newClaimWaiters(), cfg: Config{ClientLimits: ClientLimits{MaxClaimsPerRunner: 2}}}
	c := s.claims
	enter := func(id int64, name string, labels ...string) *claimWaiter {
		w, err := s.enterClaim(store.Runner{ID: id, RepoID: 1, Name: name, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	a, b, gpu := enter(1, "a"), enter(2, "b"), enter(3, "g", "gpu")
	if _, err := s.enterClaim(store.Runner{ID: 3, RepoID: 2}); err != nil {
		t.Fatalf("second claim of a runner: %v", err)
	}
	if _, err := s.enterClaim(store.Runner{ID: 3, RepoID: 2}); err == nil {
		t.Fatal("third claim of a runner was let in, want TooManyClaims")
	}

	// A run for gpu wakes only the gpu runner, however many wait before it.
	c.offer([]store.Run{{ID: 10, RepoID: 1, State: "queued", Runners: []string{"gpu"}}})
	if woken(a) || woken(b) || !woken(gpu) {
		t.Fatalf("woken: a %v, b %v, gpu %v; want only gpu", woken(a), woken(b), woken(gpu))
	}
	// Any run wakes one waiter, the oldest.
	c.offer([]store.Run{{ID: 11, RepoID: 1, State: "queued"}})
	if !woken(a) || woken(b) {
		t.Fatalf("woken: a %v, b %v; want a alone", woken(a), woken(b))
	}
	// a goes away before it looks: run 11 passes to b.
	c.leave(a)
	if !woken(b) {
		t.Fatal("a run whose waiter left was not passed on")
	}
	// b looks and finds run 11 queued but claims an older run 9: 11 goes on
	// once b leaves.
	p := c.beforeLook(b)
	c.afterLook(b, nil, []store.Run{{ID: 9}, {ID: 11}}, []int64{9}, p)
	late := enter(4, "d")
	c.leave(b)
	if !woken(late) {
		t.Fatal("a run its waiter did not take was not passed on")
	}
	// d looks and the run is gone (another runner took it): nobody more.
	p = c.beforeLook(late)
	c.afterLook(late, nil, nil, nil, p)
	if st := s.ClaimStats(); st.Woken != 4 || st.Waiting != 3 {
		t.Errorf("stats = %+v, want 4 wakes, 3 waiting (g, d and the one in repository 2)", st)
	}
}
