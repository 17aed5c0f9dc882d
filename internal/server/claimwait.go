package server

import (
	"net/http"
	"slices"
	"sync"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// claimWaiters holds the claims (long polls) waiting for work: how many
// each runner has open (at most Config.MaxClaimsPerRunner), and per
// repository, oldest first, the waiting ones. A new queued run wakes one
// waiter that qualifies for it, not all: a push costs one look, however
// many runners wait.
//
// No wake is lost: a waiter registers before it looks (enter), so a run
// queued after the look wakes it; a waiter woken for a run that it does
// not claim (it claimed an older one, went away, or no longer qualifies)
// passes the run on to the next waiter if the run is still queued.
type claimWaiters struct {
	mu        sync.Mutex
	perRunner map[int64]int
	repos     map[int64][]*claimWaiter
	woken     int64 // wakes so far (ClaimStats)
}

// claimWaiter is one waiting claim. Its fields are guarded by
// claimWaiters.mu.
type claimWaiter struct {
	x    store.Runner  // the runner as of its last look: name and labels decide which runs wake it
	wake chan struct{} // capacity 1: receives when pending is set
	// pending is the queued run this waiter was woken for and has not
	// looked for yet.
	pending *store.Run
}

// ClaimStats describes the claims waiting for work, for operators and
// tests.
type ClaimStats struct {
	Waiting int   // claims (long polls) open now
	Woken   int64 // waiters woken for a queued run since start
}

func newClaimWaiters() *claimWaiters {
	return &claimWaiters{perRunner: map[int64]int{}, repos: map[int64][]*claimWaiter{}}
}

// ClaimStats returns the numbers of claims waiting and of wakes so far.
func (s *Server) ClaimStats() ClaimStats {
	c := s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ws := range c.repos {
		n += len(ws)
	}
	return ClaimStats{Waiting: n, Woken: c.woken}
}

// enter registers a claim of runner x, unless x has max open already: a
// TooManyClaims error then. The caller must leave.
func (s *Server) enterClaim(x store.Runner) (*claimWaiter, error) {
	c, limit := s.claims, s.cfg.MaxClaimsPerRunner
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perRunner[x.ID] >= limit {
		return nil, xerr(http.StatusTooManyRequests, api.ErrTooManyClaims,
			"runner %s of %s already has %d claims open (the server's --max-claims-per-runner): a knotless-run process needs one at a time; is another process using this runner's state file?",
			x.Name, x.Repo, limit)
	}
	c.perRunner[x.ID]++
	w := &claimWaiter{x: x, wake: make(chan struct{}, 1)}
	c.repos[x.RepoID] = append(c.repos[x.RepoID], w)
	return w, nil
}

// leave unregisters w; a run it was woken for and did not look for goes to
// the next waiter.
func (c *claimWaiters) leave(w *claimWaiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perRunner[w.x.ID]--; c.perRunner[w.x.ID] <= 0 {
		delete(c.perRunner, w.x.ID)
	}
	ws := slices.DeleteFunc(c.repos[w.x.RepoID], func(o *claimWaiter) bool { return o == w })
	if len(ws) == 0 {
		delete(c.repos, w.x.RepoID)
	} else {
		c.repos[w.x.RepoID] = ws
	}
	if w.pending != nil {
		run := *w.pending
		w.pending = nil
		c.offerLocked(run)
	}
}

// beforeLook takes the run w was woken for (nil if none): the look that
// follows answers it.
func (c *claimWaiters) beforeLook(w *claimWaiter) *store.Run {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := w.pending
	w.pending = nil
	select {
	case <-w.wake:
	default:
	}
	return p
}

// afterLook records what a look found: fresh is the runner as the look
// read it (nil if it failed before), queued the runs it saw queued,
// claimed the ids of the runs it claimed (none: empty). If pending (from
// beforeLook) was still queued and is not among what w claimed, it passes
// to another waiter, or, when w claimed other runs, to whoever follows
// once w leaves.
func (c *claimWaiters) afterLook(w *claimWaiter, fresh *store.Runner, queued []store.Run, claimed []int64, pending *store.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fresh != nil {
		w.x = *fresh
	}
	if pending == nil || slices.Contains(claimed, pending.ID) || !slices.ContainsFunc(queued, func(r store.Run) bool { return r.ID == pending.ID }) {
		return
	}
	if len(claimed) > 0 {
		w.pending = pending // w is about to leave, which offers it
		return
	}
	c.offerLocked(*pending)
}

// waiting reports whether a claim of repository repo waits here.
func (c *claimWaiters) waiting(repo int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.repos[repo]) > 0
}

// waitingRepos lists the repositories with a claim waiting here.
func (c *claimWaiters) waitingRepos() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int64, 0, len(c.repos))
	for id := range c.repos {
		out = append(out, id)
	}
	return out
}

// offer wakes, for each queued run, one waiter of its repository that
// qualifies for it and is not woken already.
func (c *claimWaiters) offer(runs []store.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, run := range runs {
		if run.State == api.StateQueued {
			c.offerLocked(run)
		}
	}
}

func (c *claimWaiters) offerLocked(run store.Run) {
	for _, w := range c.repos[run.RepoID] {
		if w.pending == nil && qualifies(w.x, run) {
			w.pending = &run
			c.woken++
			select {
			case w.wake <- struct{}{}:
			default:
			}
			return
		}
	}
}
