package runner

import (
	"fmt"
	"io"
)

// DefaultLogLimit is the most log bytes kept per step (64 MiB).
const DefaultLogLimit = 64 << 20

// TruncatedMarker is the line a step's log ends with once it reached limit
// bytes; the step keeps running and the rest of its output is discarded.
func TruncatedMarker(limit int64) string {
	return fmt.Sprintf("[knotless: log truncated at %d bytes; the step keeps running]\n", limit)
}

// capWriter passes at most limit bytes to out, then the truncation marker
// (on a line of its own), then nothing. It never fails a write, so a full
// log or a broken spool cannot stop a step: a downstream error is kept in
// err and later bytes are dropped.
type capWriter struct {
	out       io.Writer
	limit     int64
	n         int64 // bytes passed to out
	last      byte  // last byte passed to out
	truncated bool
	err       error
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

func (c *capWriter) Write(p []byte) (int, error) {
	if c.err != nil || c.truncated {
		return len(p), nil
	}
	keep := p
	if rest := c.limit - c.n; int64(len(p)) > rest {
		keep = p[:rest]
	}
	if len(keep) > 0 {
		n, err := c.out.Write(keep)
		c.n += int64(n)
		if n > 0 {
			c.last = keep[n-1]
		}
		if err != nil {
			c.err = err
			return len(p), nil
		}
	}
	if len(keep) < len(p) {
		c.truncated = true
		marker := TruncatedMarker(c.limit)
		if c.n > 0 && c.last != '\n' {
			marker = "\n" + marker
		}
		if _, err := io.WriteString(c.out, marker); err != nil {
			c.err = err
		}
	}
	return len(p), nil
}
