package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"knotless.dev/knotless/internal/store"
)

func TestStoreMessage_DropsTheSentinelTheStoreWrapped(t *testing.T) {
	err := fmt.Errorf("runner 12: %w", store.ErrNotFound)
	if got := storeMessage(err, store.ErrNotFound); got != "runner 12" {
		t.Errorf("storeMessage = %q, want %q", got, "runner 12")
	}
	err = fmt.Errorf("claim run 5: no longer queued: %w", store.ErrConflict)
	if got := storeMessage(err, store.ErrConflict); got != "claim run 5: no longer queued" {
		t.Errorf("storeMessage = %q", got)
	}
}

// A handler failing because the server's own bound on a database call ran
// out (the request itself still live) is answered 503 ServerBusy with
// Retry-After, which runners wait out, not 500. Pins: 1,753 runners of
// 10,000 starting their long polls at once answered "500 internal error"
// when recording their tokens' ids timed out on SQLite.
func TestWriteErr_AServerSideTimeoutIsBusyWithRetryAfterNotInternal(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	s.metrics = &serverMetrics{apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"code"})}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/xrpc/dev.knotless.runner.claim", nil)
	s.writeErr(w, r, "dev.knotless.runner.claim", fmt.Errorf("record token id: %w", context.DeadlineExceeded))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "5" || !strings.Contains(w.Body.String(), `"ServerBusy"`) {
		t.Fatalf("answer %d, Retry-After %q, body %s", w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
	w = httptest.NewRecorder()
	s.writeErr(w, r, "dev.knotless.runner.claim", errors.New("disk on fire"))
	if w.Code != http.StatusInternalServerError {
		t.Errorf("another error answered %d, want 500", w.Code)
	}
}

// A transaction that kept colliding with others through all its retries
// (store.ErrBusy: PostgreSQL's serialization failures) is answered 503
// ServerBusy with Retry-After, not 500. Pins: 82 of 10,000 runners
// registering 8 at a time with two replicas on PostgreSQL were answered
// "500 internal error" (insert runner: could not serialize access, SQLSTATE
// 40001), and the registration failed instead of being retried.
func TestWriteErr_ATransactionThatKeptCollidingIsBusyWithRetryAfterNotInternal(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	s.metrics = &serverMetrics{apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"code"})}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/xrpc/dev.knotless.runner.register", nil)
	s.writeErr(w, r, "dev.knotless.runner.register",
		fmt.Errorf("%w (20 attempts): insert runner r1: could not serialize access", store.ErrBusy))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "5" || !strings.Contains(w.Body.String(), `"ServerBusy"`) ||
		!strings.Contains(w.Body.String(), "kept colliding") {
		t.Fatalf("answer %d, Retry-After %q, body %s", w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
}
