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
	"slices"
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

// ClaimRuns sends the runner's free slots as Max (at least 1, at most
// MaxClaimRuns) and reads both answers: the runs of a server that knows
// Max, and the one run (in Run) of an older server that ignores it. More
// runs than asked for are cut to Max, the error naming the rest.
func TestClaimRuns_SendsMaxAndReadsTheOneRunOfAnOlderServer(t *testing.T) {
	var mu sync.Mutex
	var maxes []int
	var answer ClaimOutput
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in ClaimInput
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		maxes = append(maxes, in.Max)
		out := answer
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer hs.Close()
	c := NewRunnerClient(&Client{BaseURL: hs.URL})
	ctx := context.Background()
	set := func(out ClaimOutput) {
		mu.Lock()
		answer = out
		mu.Unlock()
	}
	ids := func(runs []*ClaimedRun) []int64 {
		var out []int64
		for _, r := range runs {
			out = append(out, r.Run.ID)
		}
		return out
	}

	set(ClaimOutput{Run: &ClaimedRun{Run: Run{ID: 7}}}) // an older server
	if runs, err := c.ClaimRuns(ctx, 0, 5); err != nil || len(runs) != 1 || runs[0].Run.ID != 7 {
		t.Fatalf("ClaimRuns from an older server: %v, %v; want run 7", ids(runs), err)
	}
	set(ClaimOutput{Runs: []*ClaimedRun{{Run: Run{ID: 1}}, {Run: Run{ID: 2}}}})
	if runs, err := c.ClaimRuns(ctx, 0, 5); err != nil || len(runs) != 2 || runs[0].Run.ID != 1 || runs[1].Run.ID != 2 {
		t.Fatalf("ClaimRuns: %v, %v; want runs 1 and 2", ids(runs), err)
	}
	set(ClaimOutput{})
	if runs, err := c.ClaimRuns(ctx, 0, 1000); err != nil || runs != nil {
		t.Fatalf("ClaimRuns with nothing claimed: %v, %v", ids(runs), err)
	}
	if cr, err := c.Claim(ctx, 0); err != nil || cr != nil {
		t.Fatalf("Claim with nothing claimed: %+v, %v", cr, err)
	}
	set(ClaimOutput{Runs: []*ClaimedRun{{Run: Run{ID: 1}}, {Run: Run{ID: 2}}, {Run: Run{ID: 3}}}})
	runs, err := c.ClaimRuns(ctx, 0, 0)
	if len(runs) != 1 || runs[0].Run.ID != 1 || err == nil || !strings.Contains(err.Error(), "[2 3]") {
		t.Fatalf("ClaimRuns of 1 answered 3: %v, %v; want run 1 and an error naming runs 2 and 3", ids(runs), err)
	}
	// Claim sends no Max (an older runner's request): one run, in Run.
	if want := []int{5, 5, MaxClaimRuns, 0, 1}; !slices.Equal(maxes, want) {
		t.Errorf("Max sent = %v, want %v", maxes, want)
	}
}
