package logship

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testenv"
	"knotless.dev/knotless/internal/testwait"
)

// logServer implements the runner-facing side of appendLog, updateStep and
// complete with the server's semantics (idempotent appends by offset,
// OffsetGap with the stored size), for unit tests of the shipper. It can be
// switched down (503) to play an unreachable server.
type logServer struct {
	mu       sync.Mutex
	logs     map[string][]byte // "run/step" → bytes
	events   []string          // "log run/step size" | "step N state" | "complete state"
	final    map[int64]string  // run → final state
	down     bool
	downHits int                       // requests answered while down
	finished map[int64]bool            // runs whose appends/updates answer RunFinished
	foreign  map[int64]bool            // runs another runner holds: everything answers Forbidden
	maxBody  int                       // appendLog bodies larger than this are refused 413 (a proxy); 0: none
	appends  int                       // appendLog requests answered
	times    map[string][]api.LineTime // "run/step" → line times of the bytes stored
	maxTimes int                       // the most line times one appendLog carried
}

func newLogServer() *logServer {
	return &logServer{logs: map[string][]byte{}, final: map[int64]string{}, finished: map[int64]bool{}, foreign: map[int64]bool{}}
}

func (s *logServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(status int, name string, size *int64) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(api.Error{Name: name, Size: size})
	}
	// refused answers as the server does to a run another runner holds or
	// one that has ended, and says whether it did.
	refused := func(run int64) bool {
		switch {
		case s.foreign[run]:
			fail(http.StatusForbidden, api.ErrForbidden, nil)
		case s.finished[run]:
			fail(http.StatusConflict, api.ErrRunFinished, nil)
		default:
			return false
		}
		return true
	}
	if s.down {
		s.downHits++
		fail(http.StatusServiceUnavailable, "Unavailable", nil)
		return
	}
	switch strings.TrimPrefix(r.URL.Path, "/xrpc/") {
	case api.MethodAppendLog:
		q := r.URL.Query()
		run, _ := strconv.ParseInt(q.Get("run"), 10, 64)
		off, _ := strconv.ParseInt(q.Get("offset"), 10, 64)
		body, _ := io.ReadAll(r.Body)
		if refused(run) {
			return
		}
		if s.maxBody > 0 && len(body) > s.maxBody {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			w.Write([]byte("<html>413 Request Entity Too Large</html>"))
			return
		}
		s.appends++
		key := q.Get("run") + "/" + q.Get("step")
		have := int64(len(s.logs[key]))
		if off > have {
			fail(http.StatusConflict, api.ErrOffsetGap, &have)
			return
		}
		ts, err := api.ParseLineTimes(q.Get(api.LogTimesParam))
		if err != nil {
			fail(http.StatusBadRequest, api.ErrInvalidRequest, nil)
			return
		}
		s.maxTimes = max(s.maxTimes, len(ts))
		if skip := have - off; skip < int64(len(body)) {
			s.logs[key] = append(s.logs[key], body[skip:]...)
			for _, t := range ts {
				if t.Offset >= have && t.Offset < int64(len(s.logs[key])) {
					if s.times == nil {
						s.times = map[string][]api.LineTime{}
					}
					s.times[key] = append(s.times[key], t)
				}
			}
		}
		s.events = append(s.events, fmt.Sprintf("log %s %d", key, len(s.logs[key])))
		_ = json.NewEncoder(w).Encode(api.AppendLogOutput{Size: int64(len(s.logs[key]))})
	case api.MethodUpdateStep:
		var in api.UpdateStepInput
		_ = json.NewDecoder(r.Body).Decode(&in)
		if refused(in.Run) {
			return
		}
		s.events = append(s.events, fmt.Sprintf("step %d %s", in.Step, in.State))
		w.Write([]byte("{}"))
	case api.MethodComplete:
		var in api.CompleteInput
		_ = json.NewDecoder(r.Body).Decode(&in)
		if refused(in.Run) {
			return
		}
		s.final[in.Run] = in.State
		s.events = append(s.events, "complete "+in.State)
		w.Write([]byte("{}"))
	default:
		fail(http.StatusNotFound, api.ErrNotImplemented, nil)
	}
}

func (s *logServer) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *logServer) log(run int64, step int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.logs[fmt.Sprintf("%d/%d", run, step)]...)
}

func (s *logServer) finalState(run int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final[run]
}

func (s *logServer) eventList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// appendStep and appendDone journal what runner.SpoolReporter would.
func appendStep(t *testing.T, sp *Spool, in api.UpdateStepInput) {
	t.Helper()
	in.Run = sp.Run()
	if err := sp.Append(JournalEntry{Step: &in}); err != nil {
		t.Fatal(err)
	}
}

func appendDone(t *testing.T, sp *Spool, in api.CompleteInput) {
	t.Helper()
	in.Run = sp.Run()
	if err := sp.Append(JournalEntry{Complete: &in}); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func startShipper(t *testing.T, srv *logServer, sp *Spool) (context.CancelFunc, chan error) {
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sh := &Shipper{Client: api.NewRunnerClient(&api.Client{BaseURL: hs.URL}), Spool: sp, Log: testLogger(t), MaxBackoff: 100 * time.Millisecond}
	go func() { done <- sh.Run(ctx) }()
	t.Cleanup(cancel)
	return cancel, done
}

func TestShipper_DeliversLogsBeforeUpdatesAndCompleteLast(t *testing.T) {
	srv := newLogServer()
	sp, err := CreateSpool(t.TempDir(), 7)
	if err != nil {
		t.Fatal(err)
	}
	_, done := startShipper(t, srv, sp)

	setup, _ := sp.Log(0)
	setup.Write([]byte("setup line\n"))
	setup.Close()
	appendStep(t, sp, api.UpdateStepInput{Step: 1, Name: "build", State: api.StepRunning})
	w, _ := sp.Log(1)
	var want bytes.Buffer
	for i := range 2000 {
		line := fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", i%300))
		want.WriteString(line)
		w.Write([]byte(line))
	}
	// 3 MiB more in one write: several chunks.
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16)
	want.Write(big)
	w.Write(big)
	w.Close()
	appendStep(t, sp, api.UpdateStepInput{Step: 1, Name: "build", State: api.StepSucceeded, ExitCode: ptr(0)})
	appendDone(t, sp, api.CompleteInput{State: api.StateSucceeded})

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shipper: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shipper did not finish")
	}
	if got := srv.log(7, 1); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("step log differs: got %d bytes, want %d", len(got), want.Len())
	}
	if got := string(srv.log(7, 0)); got != "setup line\n" {
		t.Fatalf("setup log = %q", got)
	}
	ev := srv.eventList()
	last := ev[len(ev)-1]
	if last != "complete succeeded" {
		t.Fatalf("last event %q, want complete: %v", last, ev)
	}
	// The step's final update comes after its last log byte.
	iFinal, iLastLog := -1, -1
	for i, e := range ev {
		if e == "step 1 succeeded" {
			iFinal = i
		}
		if e == fmt.Sprintf("log 7/1 %d", want.Len()) {
			iLastLog = i
		}
	}
	if iFinal < 0 || iLastLog < 0 || iFinal < iLastLog {
		t.Fatalf("step update before its log was whole: %v", ev)
	}
	if _, err := os.Stat(sp.Dir()); !os.IsNotExist(err) {
		t.Fatalf("spool not removed after complete: %v", err)
	}
}

func TestShipper_ServerDownKeepsEverythingAndDeliversLater(t *testing.T) {
	srv := newLogServer()
	srv.setDown(true)
	sp, err := CreateSpool(t.TempDir(), 8)
	if err != nil {
		t.Fatal(err)
	}
	_, done := startShipper(t, srv, sp)
	appendStep(t, sp, api.UpdateStepInput{Step: 1, Name: "s", State: api.StepRunning})
	w, _ := sp.Log(1)
	w.Write([]byte("before\n"))
	testwait.For(t, 10*time.Second, "failed deliveries", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.downHits >= 3
	})
	w.Write([]byte("during\n"))
	w.Close()
	appendStep(t, sp, api.UpdateStepInput{Step: 1, Name: "s", State: api.StepFailed, ExitCode: ptr(3), Reason: api.ReasonExitCode})
	appendDone(t, sp, api.CompleteInput{State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: ptr(3)})
	if srv.finalState(8) != "" {
		t.Fatal("complete arrived while the server was down")
	}
	srv.setDown(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shipper: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shipper did not finish after the server came back")
	}
	if got := string(srv.log(8, 1)); got != "before\nduring\n" {
		t.Fatalf("log = %q", got)
	}
	if srv.finalState(8) != api.StateFailed {
		t.Fatalf("final state %q", srv.finalState(8))
	}
}

func TestShipper_OffsetGapResendsFromServerSize(t *testing.T) {
	srv := newLogServer()
	root := t.TempDir()
	sp, err := CreateSpool(root, 9)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := sp.Log(1)
	w.Write([]byte("abcdefghij"))
	w.Close()
	// A cursor ahead of the server (as after the server lost its tail).
	if err := sp.saveCursor(shipCursor{Logs: map[int]int64{1: 6}}); err != nil {
		t.Fatal(err)
	}
	srv.logs["9/1"] = []byte("abc")
	appendDone(t, sp, api.CompleteInput{State: api.StateSucceeded})
	sp.Close()
	_, done := startShipper(t, srv, sp)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := string(srv.log(9, 1)); got != "abcdefghij" {
		t.Fatalf("log = %q", got)
	}
}

func TestShipper_RecoveredSpoolResumesWithoutDuplicates(t *testing.T) {
	srv := newLogServer()
	root := t.TempDir()
	sp, err := CreateSpool(root, 10)
	if err != nil {
		t.Fatal(err)
	}
	appendStep(t, sp, api.UpdateStepInput{Step: 1, Name: "s", State: api.StepRunning})
	w, _ := sp.Log(1)
	w.Write([]byte("first half\n"))
	// A first process ships part of it and the step update, then dies.
	// It dies once its cursor holds both: what a process had not yet
	// recorded as acknowledged is sent again, by design (the server takes
	// a step update twice alike). Waiting only for the log bytes, the
	// test cancelled while the step update was in flight and failed
	// with "step update sent 2 times" (a cold CI run).
	cancel, done := startShipper(t, srv, sp)
	testwait.For(t, 5*time.Second, "first half and the step update acknowledged", func() bool {
		cur, err := sp.loadCursor()
		return err == nil && cur.Logs[1] == 11 && cur.Entries == 1 && len(srv.log(10, 1)) == 11
	})
	cancel()
	<-done
	w.Write([]byte("second half\n"))
	w.Close()
	sp.Close()

	// A new process: reopen, finish the journal as a restart does, ship.
	sp2, err := OpenSpool(sp.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := sp2.Completed(); ok {
		t.Fatal("journal reports completion before Done")
	}
	appendDone(t, sp2, api.CompleteInput{State: api.StateErrored, Reason: api.ReasonRunnerLost})
	_, done2 := startShipper(t, srv, sp2)
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
	if got := string(srv.log(10, 1)); got != "first half\nsecond half\n" {
		t.Fatalf("log = %q", got)
	}
	running := 0
	for _, e := range srv.eventList() {
		if e == "step 1 running" {
			running++
		}
	}
	if running != 1 {
		t.Fatalf("step update sent %d times: %v", running, srv.eventList())
	}
}

func TestShipper_RunFinishedOnServerDropsSpool(t *testing.T) {
	srv := newLogServer()
	srv.finished[11] = true
	shipEndedRunExpectingDrop(t, srv, 11, api.CompleteInput{State: api.StateCancelled, Reason: api.ReasonCancelled},
		"a run the server ended")
}

// TestShipper_RunHeldByAnotherIdentityDropsSpool pins a runner logged in
// anew (after its removal) retrying forever the spool its old identity
// left: the server answers Forbidden to every delivery of it.
func TestShipper_RunHeldByAnotherIdentityDropsSpool(t *testing.T) {
	srv := newLogServer()
	srv.foreign[12] = true
	shipEndedRunExpectingDrop(t, srv, 12, api.CompleteInput{State: api.StateCancelled, Reason: api.ReasonRunnerStopped},
		"a run another runner holds")
}

// shipEndedRunExpectingDrop spools run id (one running step with one log
// line, then res) and ships it to srv: the shipper must return without an
// error within 10 s and remove the spool. what names the run in the failure.
func shipEndedRunExpectingDrop(t *testing.T, srv *logServer, id int64, res api.CompleteInput, what string) {
	t.Helper()
	sp, err := CreateSpool(t.TempDir(), id)
	if err != nil {
		t.Fatal(err)
	}
	appendStep(t, sp, api.UpdateStepInput{Step: 1, Name: "s", State: api.StepRunning})
	w, _ := sp.Log(1)
	w.Write([]byte("x\n"))
	w.Close()
	appendDone(t, sp, res)
	_, done := startShipper(t, srv, sp)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shipper kept retrying " + what)
	}
	if _, err := os.Stat(sp.Dir()); !os.IsNotExist(err) {
		t.Fatal("spool kept")
	}
}

func TestShipper_TooLargeAnswerHalvesTheChunk(t *testing.T) {
	srv := newLogServer()
	srv.maxBody = 600 << 10 // a proxy's limit
	sp, err := CreateSpool(t.TempDir(), 11)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := sp.Log(1)
	want := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	w.Write(want)
	w.Close()
	appendDone(t, sp, api.CompleteInput{State: api.StateSucceeded})
	_, done := startShipper(t, srv, sp)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shipper: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shipper did not finish")
	}
	if got := srv.log(11, 1); !bytes.Equal(got, want) {
		t.Fatalf("log differs: got %d bytes, want %d", len(got), len(want))
	}
	if srv.appends < 6 {
		t.Fatalf("%d requests for 3 MiB in chunks of at most 600 KiB", srv.appends)
	}
}

// TestShipper_GivesBackShippedBytesBelowTheCheckpoint pins that the spool
// does not keep a long log whole: what the server acknowledged goes (the
// file keeps its size), except what a restarted runner reads (from the
// byte before the step's last checkpoint on), and a log without
// checkpoints (setup) stays.
func TestShipper_GivesBackShippedBytesBelowTheCheckpoint(t *testing.T) {
	srv := newLogServer()
	dir := t.TempDir()
	if err := probePunch(dir); err != nil {
		t.Logf("%s cannot punch holes (%v): the spool goes on a tmpfs", dir, err)
		dir = testenv.Tmpfs(t, "64m")
	}
	sp, err := CreateSpool(dir, 12)
	if err != nil {
		t.Fatal(err)
	}
	if err := probePunch(sp.Dir()); err != nil {
		t.Fatalf("the spool's file system cannot punch holes: %v", err)
	}
	setup, _ := sp.Log(0)
	setupBytes := bytes.Repeat([]byte("setup\n"), 400_000) // 2.4 MB
	setup.Write(setupBytes)
	setup.Close()
	w, _ := sp.Log(1)
	want := bytes.Repeat([]byte("0123456789abcdef"), 5<<16) // 5 MiB
	w.Write(want)
	cw, err := sp.Checkpoints(1)
	if err != nil {
		t.Fatal(err)
	}
	const ckpt = 3<<20 + 1000
	if err := cw.Save(Checkpoint{Raw: ckpt, Log: ckpt}); err != nil {
		t.Fatal(err)
	}
	cw.Close()
	startShipper(t, srv, sp)
	testwait.For(t, 20*time.Second, "the log delivered", func() bool { return len(srv.log(12, 1)) == len(want) })
	if got := srv.log(12, 1); !bytes.Equal(got, want) {
		t.Fatal("the server's log differs from the spool's")
	}
	path := filepath.Join(sp.Dir(), "step-1.log")
	testwait.For(t, 10*time.Second, "the shipped bytes given back", func() bool {
		b, _ := os.ReadFile(path)
		return len(b) == len(want) && bytes.Count(b[:3<<20], []byte{0}) == 3<<20
	})
	b, _ := os.ReadFile(path)
	if !bytes.Equal(b[3<<20:], want[3<<20:]) {
		t.Fatal("bytes from the checkpoint's megabyte on were given back")
	}
	if b, _ := os.ReadFile(filepath.Join(sp.Dir(), "step-0.log")); !bytes.Equal(b, setupBytes) {
		t.Fatal("the setup log, which has no checkpoints, changed")
	}
}

// probePunch reports whether files in dir can have holes punched.
func probePunch(dir string) error {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 8192)); err != nil {
		return err
	}
	return punchHole(f, 0, 4096)
}
