package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestClient_EveryCallHitsItsMethodAndCarriesTheSessionButStartSession pins
// the NSID of each typed call and that SetSession's value travels on every
// call but the one that opens a session.
func TestClient_EveryCallHitsItsMethodAndCarriesTheSessionButStartSession(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // NSID → session header
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nsid := strings.TrimPrefix(r.URL.Path, "/xrpc/")
		mu.Lock()
		seen[nsid] = r.Header.Get(SessionHeader)
		mu.Unlock()
		if r.Header.Get("X-Auth") != "signed" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var out any = struct{}{}
		switch nsid {
		case MethodStartSession:
			out = StartSessionOutput{Session: "s2"}
		case MethodAppendLog:
			out = AppendLogOutput{Size: 5}
		case MethodResumeRun:
			out = ClaimedRun{Run: Run{ID: 3}, CancelRequested: true}
		case MethodHeartbeat:
			out = HeartbeatOutput{Cancel: true}
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer hs.Close()
	c := NewRunnerClient(&Client{BaseURL: hs.URL, Auth: func(req *http.Request, _ string) error {
		req.Header.Set("X-Auth", "signed") // the runner's own signing still runs
		return nil
	}})
	ctx := context.Background()
	c.SetSession("s1")
	s, err := c.StartSession(ctx, StartSessionInput{Executor: "shell"})
	if err != nil || s.Session != "s2" {
		t.Fatalf("StartSession: %+v, %v", s, err)
	}
	c.SetSession(s.Session)
	if cr, err := c.Claim(ctx, 0); err != nil || cr != nil {
		t.Fatalf("Claim: %+v, %v", cr, err)
	}
	if hb, err := c.Heartbeat(ctx, 3); err != nil || !hb.Cancel {
		t.Fatalf("Heartbeat: %+v, %v", hb, err)
	}
	if err := c.UpdateStep(ctx, UpdateStepInput{Run: 3, Step: 1, State: StepRunning}); err != nil {
		t.Fatalf("UpdateStep: %v", err)
	}
	if size, err := c.AppendLog(ctx, 3, 1, 0, []byte("hello")); err != nil || size != 5 {
		t.Fatalf("AppendLog: %d, %v", size, err)
	}
	if err := c.Complete(ctx, CompleteInput{Run: 3, State: StateSucceeded}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if cr, err := c.ResumeRun(ctx, 3); err != nil || cr.Run.ID != 3 || !cr.CancelRequested {
		t.Fatalf("ResumeRun: %+v, %v", cr, err)
	}
	if _, err := c.Handover(ctx, HandoverInput{Reason: "SIGTERM"}); err != nil {
		t.Fatalf("Handover: %v", err)
	}
	want := map[string]string{
		MethodStartSession: "", MethodClaim: "s2", MethodHeartbeat: "s2", MethodUpdateStep: "s2",
		MethodAppendLog: "s2", MethodComplete: "s2", MethodResumeRun: "s2", MethodHandover: "s2",
	}
	for nsid, session := range want {
		if got, ok := seen[nsid]; !ok || got != session {
			t.Errorf("%s: called %v, session header %q, want %q", nsid, ok, got, session)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("methods called: %v", seen)
	}
}

// TestClient_AppendLogFileSendsExactlyItsRangeWithALength pins that a
// file's range goes with a Content-Length (the server reads it in one go)
// and holds exactly those bytes, however long the file is, and that the
// file stays the caller's.
func TestClient_AppendLogFileSendsExactlyItsRangeWithALength(t *testing.T) {
	var got []byte
	var length int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		length = r.ContentLength
		got, _ = io.ReadAll(r.Body)
		_ = json.NewEncoder(w).Encode(AppendLogOutput{Size: 10 + int64(len(got))})
	}))
	defer hs.Close()
	path := filepath.Join(t.TempDir(), "log")
	data := bytes.Repeat([]byte("0123456789"), 200_000) // 2 MB: past the transport's buffers
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c := NewRunnerClient(&Client{BaseURL: hs.URL})
	for _, n := range []int64{1, 5, 1 << 20, int64(len(data)) - 10} {
		size, err := c.AppendLogFile(context.Background(), 3, 1, 10, path, n, nil)
		if err != nil || size != 10+n {
			t.Fatalf("AppendLogFile of %d bytes: %d, %v", n, size, err)
		}
		if length != n || !bytes.Equal(got, data[10:10+n]) {
			t.Fatalf("AppendLogFile of %d bytes: the server got %d bytes (Content-Length %d), want bytes 10-%d of the file", n, len(got), length, 10+n)
		}
	}
}
