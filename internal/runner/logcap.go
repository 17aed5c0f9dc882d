package runner

import (
	"fmt"
	"io"
	"time"
)

// DefaultLogLimit is the most log bytes kept per step (64 MiB).
const DefaultLogLimit = 64 << 20

// TruncatedMarker is the line a step's log ends with once it reached limit
// bytes; the step keeps running and the rest of its output is discarded.
func TruncatedMarker(limit int64) string {
	return fmt.Sprintf("[knotless: log truncated at %d bytes; the step keeps running]\n", limit)
}

// LostMarker is the line a log holds where the runner could not write n
// bytes of it (the spool's disk was full, say): the log is not whole, and
// the step that wrote it does not end succeeded.
func LostMarker(n int64, err error) string {
	return fmt.Sprintf("[knotless: %d bytes of this log were lost here: the runner could not write them: %v]\n", n, err)
}

// RestartMarker is the line a step's log holds where its output goes on
// after the runner process that followed it stopped and another, by, took
// the run over at t: a gap in the lines' times is the restart. The
// output after it is what the new process read from the step's last
// checkpoint on.
func RestartMarker(by string, t time.Time) string {
	return fmt.Sprintf("[knotless: the runner restarted: %s took this step over at %s; its output goes on below]\n",
		by, t.UTC().Format(time.RFC3339))
}

// ReconnectMarker is the line a step's log holds where its output resumed
// at t on a new connection to the step's environment after the last one
// dropped (err): the step ran on meanwhile, and nothing was lost.
func ReconnectMarker(err error, t time.Time) string {
	why := "the connection to the step agent dropped"
	if err != nil {
		why += " (" + firstLine(err.Error()) + ")"
	}
	return fmt.Sprintf("[knotless: %s; its output resumed at %s, nothing lost]\n", why, t.UTC().Format(time.RFC3339))
}

// capWriter passes at most limit bytes to out, then the truncation marker
// (on a line of its own), then nothing. It never fails a write, so a full
// log or a broken spool cannot stop a step. A downstream error is not
// silent: the bytes are counted as lost, later writes first try to put
// LostMarker where they were lost (the disk may have room again once the
// shipper gave back what it delivered) and go on from there; lost and err
// tell the step's end what happened.
type capWriter struct {
	out       io.Writer
	limit     int64
	n         int64 // bytes passed to out
	last      byte  // last byte passed to out
	truncated bool
	err       error // the first write error
	lost      int64 // bytes lost in all
	pending   int64 // bytes lost since the last marker written
	marked    int   // markers written
	lastErr   error // the error of the bytes pending
}

func newCapWriter(out io.Writer, limit int64) *capWriter {
	if limit <= 0 {
		limit = DefaultLogLimit
	}
	return &capWriter{out: out, limit: limit}
}

// resumeCapWriter continues a log that holds n bytes already, the last of
// them last: past the limit, it holds the marker and nothing more comes.
func resumeCapWriter(out io.Writer, limit, n int64, last byte) *capWriter {
	c := newCapWriter(out, limit)
	c.n, c.last = min(n, c.limit), last
	c.truncated = n > c.limit
	return c
}

// pass writes p to out, counting what it could not write as lost.
func (c *capWriter) pass(p []byte) bool {
	n, err := c.out.Write(p)
	c.n += int64(n)
	if n > 0 {
		c.last = p[n-1]
	}
	if err != nil {
		c.loss(int64(len(p)-n), err)
		return false
	}
	return true
}

func (c *capWriter) loss(n int64, err error) {
	if c.err == nil {
		c.err = err
	}
	c.lastErr = err
	c.lost += n
	c.pending += n
}

// mark writes the marker of the pending lost bytes, if any; it reports
// whether the log may go on (nothing pending any more).
func (c *capWriter) mark() bool {
	if c.pending == 0 {
		return true
	}
	marker := LostMarker(c.pending, c.lastErr)
	if c.n > 0 && c.last != '\n' {
		marker = "\n" + marker
	}
	n, err := io.WriteString(c.out, marker)
	c.n += int64(n)
	if n > 0 {
		c.last = marker[n-1]
	}
	if err != nil {
		return false // tried again with the next write, or at the end
	}
	c.pending = 0
	c.marked++
	return true
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.truncated {
		return len(p), nil
	}
	keep := p
	if rest := c.limit - c.n; int64(len(p)) > rest {
		keep = p[:max(rest, 0)]
	}
	if !c.mark() {
		c.pending += int64(len(keep))
		c.lost += int64(len(keep))
		return len(p), nil
	}
	if len(keep) > 0 && !c.pass(keep) {
		return len(p), nil
	}
	if len(keep) < len(p) {
		c.truncated = true
		marker := TruncatedMarker(c.limit)
		if c.n > 0 && c.last != '\n' {
			marker = "\n" + marker
		}
		if _, err := io.WriteString(c.out, marker); err != nil && c.err == nil {
			c.err = err
		}
	}
	return len(p), nil
}

// finish tries, for up to wait, to write the marker of bytes lost last (the
// shipper may be giving space back meanwhile). It reports whether the log
// holds a marker for every byte lost.
// When the wait is over, or at once when free is set and gives up space
// kept back for this (the spool's reserve), it tries once more.
func (c *capWriter) finish(wait time.Duration, free func() bool) bool {
	deadline := time.Now().Add(wait)
	for !c.mark() {
		if free != nil && free() {
			continue
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// reserveOf returns w's FreeReserve, if it has one.
func reserveOf(w any) func() bool {
	if r, ok := w.(interface{ FreeReserve() bool }); ok {
		return r.FreeReserve
	}
	return nil
}
