package server

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// hub wakes goroutines waiting for something to change under a key (a
// run's logs and state, a runner's session) without polling: wait returns
// a channel that notify closes. Waiters subscribe before they look, so no
// change between looking and waiting is missed.
type hub struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func newHub() *hub { return &hub{ch: map[string]chan struct{}{}} }

// wait returns a channel closed by the next notify(key).
func (h *hub) wait(key string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.ch[key]
	if c == nil {
		c = make(chan struct{})
		h.ch[key] = c
	}
	return c
}

// notifyAll wakes every waiter of every key.
func (h *hub) notifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, c := range h.ch {
		close(c)
		delete(h.ch, key)
	}
}

// waited reports whether someone subscribed to key since its last notify.
func (h *hub) waited(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ch[key] != nil
}

// RunWatched reports whether someone waits for run id to change (a long
// poll of one of its logs, a page following it) since it last changed: for
// tests, which wait for it instead of sleeping.
func (s *Server) RunWatched(id int64) bool { return s.hub.waited(runKey(id)) }

// notify wakes every current waiter of key.
func (h *hub) notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.ch[key]; c != nil {
		close(c)
		delete(h.ch, key)
	}
}

func runKey(id int64) string { return "run:" + strconv.FormatInt(id, 10) }

// runnerKey is notified when a runner's session ends (a new session
// started, or it handed over).
func runnerKey(id int64) string { return "runner:" + strconv.FormatInt(id, 10) }

// pruneEvery is how often the sweeper forgets the expired jti values of
// runner tokens.
const pruneEvery = time.Minute

// sweep ends runs whose lease lapsed, a few times per lease (at most every
// second), until Close; with replicas, only on the one holding the
// sweeper's lock (sweeperLease). It also forgets expired token ids.
func (s *Server) sweep() {
	defer close(s.sweepDone)
	every := s.cfg.Lease / 4
	every = min(max(every, 50*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	lease := &sweeperLease{s: s}
	defer lease.release()
	var pruned time.Time
	for {
		select {
		case <-s.sweepStop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if !lease.leading(ctx) {
			cancel()
			continue
		}
		if time.Since(pruned) >= pruneEvery {
			pruned = s.now()
			if _, err := s.store.PruneJTIs(ctx, pruned); err != nil {
				s.log.Warn("forget expired runner token ids", "err", err)
			}
			s.pruneTmp()
		}
		lost, err := s.store.ExpireLeases(ctx, s.now())
		cancel()
		if err != nil {
			s.log.Error("expire leases", "err", err)
			continue
		}
		s.metrics.leasesExpired.Add(float64(len(lost)))
		for _, r := range lost {
			s.log.Warn("run finished", "run", r.ID, "repo", r.Repo, "workflow", r.Workflow,
				"state", r.State, "reason", r.Reason, "runner", r.RunnerName, "message", r.Message)
			s.runEnded(context.Background(), r)
			s.notify(runKey(r.ID))
		}
	}
}

// touchRunner records that a runner was heard from, writing at most every
// two seconds per runner.
func (s *Server) touchRunner(ctx context.Context, id int64) {
	now := s.now()
	s.seenMu.Lock()
	last, ok := s.seen[id]
	if ok && now.Sub(last) < 2*time.Second {
		s.seenMu.Unlock()
		return
	}
	s.seen[id] = now
	s.seenMu.Unlock()
	if err := s.store.TouchRunner(ctx, id, now); err != nil {
		s.log.Warn("record runner last seen", "runner", id, "err", err)
	}
}
