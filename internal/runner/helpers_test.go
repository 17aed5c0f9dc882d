package runner

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(&testWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// recordingLogger is testLogger that also keeps the lines, for tests that
// wait for an event the runner logs.
func recordingLogger(t *testing.T) (*slog.Logger, *testWriter) {
	w := &testWriter{t: t, keep: true}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})), w
}

type testWriter struct {
	t    *testing.T
	keep bool
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	if w.keep {
		w.mu.Lock()
		w.buf.Write(p)
		w.mu.Unlock()
	}
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (w *testWriter) contains(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Contains(w.buf.String(), s)
}
