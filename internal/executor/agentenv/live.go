package agentenv

import "sync"

// Live is the set of sessions an executor holds in this process, by
// Spec.ID. An ID is reserved while its session is prepared or recovered,
// so that two Prepares (or Recovers) of one ID cannot both go on, and held
// until the session's Cleanup or Detach (Forget). Sweep skips what it
// holds. The zero value is ready to use; safe for concurrent use.
type Live struct {
	mu sync.Mutex
	m  map[string]*Session // nil value: reserved, not made yet
}

// Reserve takes id for a session being made; false when this process
// already holds or reserves it.
func (l *Live) Reserve(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[id]; ok {
		return false
	}
	if l.m == nil {
		l.m = map[string]*Session{}
	}
	l.m[id] = nil
	return true
}

// Done ends a reservation: s becomes the session held for id, or, with s
// nil (its making failed), id is free again.
func (l *Live) Done(id string, s *Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == nil {
		delete(l.m, id)
		return
	}
	l.m[id] = s
}

// Forget frees id if s is the session held for it (the session's Cleanup or Detach).
func (l *Live) Forget(id string, s *Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[id] == s {
		delete(l.m, id)
	}
}

// Holds reports whether id is held or reserved.
func (l *Live) Holds(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[id]
	return ok
}

// IDs returns every ID held or reserved.
func (l *Live) IDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.m))
	for id := range l.m {
		ids = append(ids, id)
	}
	return ids
}
