package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestRetryWait_ServerBackAfterOutageIsReachedWithinASecond: while nothing
// answers at the server's address, retries come about every second however
// long the outage, so a returning server is reached within a second or two
// (it used to be up to 15 s: a doubling backoff). A server that answers
// with errors still gets the full, doubling backoff.
func TestRetryWait_ServerBackAfterOutageIsReachedWithinASecond(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := &Client{BaseURL: "http://" + addr}
	callErr := c.Query(context.Background(), "dev.knotless.test", nil, nil)
	if callErr == nil || !Unreachable(callErr) || !Retryable(callErr) {
		t.Fatalf("error of a call to a closed port: %v (unreachable %v)", callErr, Unreachable(callErr))
	}
	for n := 0; n < 40; n++ {
		if d := RetryWait(n, callErr, 15*time.Second); d > UnreachableBackoff || d < 0 {
			t.Fatalf("retry %d waits %s while the server is down, want at most %s", n, d, UnreachableBackoff)
		}
	}
	if d := RetryWait(0, callErr, 15*time.Second); d < 100*time.Millisecond {
		t.Errorf("first retry after %s: too eager", d)
	}
	busy := &Error{Status: http.StatusServiceUnavailable}
	if Unreachable(busy) {
		t.Error("a 503 answer taken for an unreachable server")
	}
	if d := RetryWait(10, busy, 15*time.Second); d < 7*time.Second {
		t.Errorf("retry 10 of a server answering 503 waits %s, want the doubling backoff (>= 7.5 s)", d)
	}
	if Unreachable(context.DeadlineExceeded) || Unreachable(errors.New("x")) {
		t.Error("a timeout or another error taken for an unreachable server")
	}
}

// A server answering 503 with Retry-After: 5 (past its --max-conns) is
// retried after at least 5 s, not after the first backoff's ~200 ms: the
// client reads the header into Error.RetryAfter. Pins: thousands of
// refused runners coming back at once, ignoring the server's wait.
func TestRetryWait_WaitsAtLeastTheServersRetryAfter(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"ServerBusy","message":"the server holds as many connections as it may"}`))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	callErr := (&Client{BaseURL: "http://" + ln.Addr().String()}).Query(context.Background(), "dev.knotless.test", nil, nil)
	var e *Error
	if !errors.As(callErr, &e) || e.RetryAfter != 5*time.Second || !Retryable(callErr) {
		t.Fatalf("the 503's error: %#v", callErr)
	}
	for n := 0; n < 5; n++ {
		if d := RetryWait(n, callErr, 15*time.Second); d < 5*time.Second || d > 15*time.Second {
			t.Errorf("retry %d waits %s, want between the server's 5 s and the cap", n, d)
		}
	}
}
