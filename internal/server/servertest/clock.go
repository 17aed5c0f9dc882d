package servertest

import (
	"sync"
	"time"
)

// Clock is a server clock a test moves forward: the real time plus an
// offset that only Advance changes, so it never goes back and still moves
// between Advances (timeouts and log times stay sensible). The zero value
// is the real clock; a nil *Clock means the server's default.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the real time plus every Advance so far.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock d forward (d ≥ 0), e.g. past a token's expiry.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += max(d, 0)
}

// now is c.Now, or nil (the server's default clock) for a nil c.
func (c *Clock) now() func() time.Time {
	if c == nil {
		return nil
	}
	return c.Now
}
