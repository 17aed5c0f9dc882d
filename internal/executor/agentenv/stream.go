package agentenv

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
)

// stderrCap bounds what StderrTail keeps (bytes).
const stderrCap = 4096

// StderrTail is the STDERR of an exec that bridges to the agent
// (`knotless-agent connect`): the bridge's own complaints, kept (the first
// 4 KiB) to explain how the stream ended. Safe for concurrent use; the zero
// value is ready.
type StderrTail struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write keeps what fits and never fails.
func (t *StderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := stderrCap - t.buf.Len(); n > 0 {
		t.buf.Write(p[:min(len(p), n)])
	}
	return len(p), nil
}

// String is what was kept, trimmed.
func (t *StderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.buf.String())
}

// Explain returns err with what the bridge said, when it said anything:
// "ERR (the bridge said: ...)". It wraps err.
func (t *StderrTail) Explain(err error) error {
	if msg := t.String(); msg != "" {
		return fmt.Errorf("%w (the bridge said: %s)", err, msg)
	}
	return err
}
