package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testwait"
)

// appendLog sends data at offset to a step log.
func appendLog(r *servertest.Runner, run int64, step int, offset int64, data string) (int64, error) {
	resp, err := r.Client.Do(context.Background(), http.MethodPost, api.MethodAppendLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {fmt.Sprint(step)}, "offset": {fmt.Sprint(offset)}},
		"application/octet-stream", strings.NewReader(data))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct{ Size int64 }
	b, _ := io.ReadAll(resp.Body)
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), `{"size":%d}`, &out.Size); err != nil {
		return 0, fmt.Errorf("decode %q: %w", b, err)
	}
	return out.Size, nil
}

// claimedRun pushes a workflow and has an approved runner claim its run.
func claimedRun(t *testing.T, f *fixture) (*servertest.Runner, *api.ClaimedRun) {
	t.Helper()
	queueOne(t, f, "")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	c := claim(t, r, 0)
	if c == nil {
		t.Fatal("no run claimed")
	}
	return r, c
}

func procedure(t *testing.T, r *servertest.Runner, nsid string, in, out any) {
	t.Helper()
	if err := r.Client.Procedure(context.Background(), nsid, in, out); err != nil {
		t.Fatalf("%s: %v", nsid, err)
	}
}

func TestLease_LapsedRunEndsErroredRunnerLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second})
	_, c := claimedRun(t, f)
	if c.LeaseSeconds != 1 {
		t.Errorf("LeaseSeconds = %d, want 1", c.LeaseSeconds)
	}
	run := f.WaitRun(t, c.Run.ID, 10*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	if run.State != api.StateErrored || run.Reason != api.ReasonRunnerLost || !strings.Contains(run.Message, "r1") ||
		!strings.Contains(run.Message, "last heard") {
		t.Fatalf("run = %s/%s %q; want errored/runner-lost naming runner r1 and when it was last heard", run.State, run.Reason, run.Message)
	}
}

func TestLease_HeartbeatsKeepRunAliveAndCarryCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second})
	r, c := claimedRun(t, f)
	ctx := context.Background()
	// Three lease lengths of heartbeats: the run stays claimed.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var hb api.HeartbeatOutput
		procedure(t, r, api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, &hb)
		if hb.Cancel {
			t.Fatal("heartbeat says cancel; nobody cancelled")
		}
		time.Sleep(200 * time.Millisecond)
	}
	var run api.Run
	if err := f.alice().Query(ctx, api.MethodGetRun, url.Values{"run": {itoa(c.Run.ID)}}, &run); err != nil {
		t.Fatal(err)
	}
	if run.State != api.StateClaimed {
		t.Fatalf("run with heartbeats is %s/%s, want claimed", run.State, run.Reason)
	}
	// Cancel: the heartbeat carries it; the runner completes as cancelled.
	if err := f.alice().Procedure(ctx, api.MethodCancelRun, api.RunRef{Run: c.Run.ID}, &run); err != nil {
		t.Fatal(err)
	}
	var hb api.HeartbeatOutput
	procedure(t, r, api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, &hb)
	if !hb.Cancel {
		t.Fatal("heartbeat after cancel does not say cancel")
	}
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: c.Run.ID, State: api.StateCancelled, Reason: api.ReasonCancelled}, nil)
	err := r.Client.Procedure(ctx, api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, nil)
	if !api.IsError(err, api.ErrRunFinished) {
		t.Errorf("heartbeat of a final run: err = %v, want RunFinished", err)
	}
	err = f.alice().Procedure(ctx, api.MethodCancelRun, api.RunRef{Run: c.Run.ID}, nil)
	if !api.IsError(err, api.ErrRunFinished) {
		t.Errorf("cancel of a final run: err = %v, want RunFinished", err)
	}
}

func TestLease_CancelledRunWhoseRunnerVanishesEndsCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second})
	_, c := claimedRun(t, f)
	if err := f.alice().Procedure(context.Background(), api.MethodCancelRun, api.RunRef{Run: c.Run.ID}, nil); err != nil {
		t.Fatal(err)
	}
	run := f.WaitRun(t, c.Run.ID, 10*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	if run.State != api.StateCancelled || run.Reason != api.ReasonCancelled {
		t.Fatalf("run = %s/%s, want cancelled/cancelled", run.State, run.Reason)
	}
}

func TestCancel_QueuedRunEndsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	queued := queueOne(t, f, "")
	var run api.Run
	if err := f.alice().Procedure(context.Background(), api.MethodCancelRun, api.RunRef{Run: queued.ID}, &run); err != nil {
		t.Fatal(err)
	}
	if run.State != api.StateCancelled || run.Reason != api.ReasonCancelled || run.FinishedAt == nil {
		t.Fatalf("cancelled queued run = %+v", run)
	}
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	if c := claim(t, r, 0); c != nil {
		t.Fatal("a cancelled run was claimed")
	}
}

func TestAppendLog_RetriesAndOverlapsNeverDuplicateAndGapsAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	mustSize := func(want int64, offset int64, data string) {
		t.Helper()
		got, err := appendLog(r, id, 1, offset, data)
		if err != nil || got != want {
			t.Fatalf("append %q at %d: size %d, err %v; want size %d", data, offset, got, err, want)
		}
	}
	mustSize(6, 0, "hello ")
	mustSize(6, 0, "hello ")    // retry of the same chunk
	mustSize(11, 3, "lo world") // overlaps 3 bytes
	mustSize(11, 6, "world")    // entirely held
	mustSize(12, 11, "\n")      // next chunk
	_, err := appendLog(r, id, 1, 20, "gap")
	var e *api.Error
	if !errorAs(err, &e) || e.Name != api.ErrOffsetGap || e.Status != http.StatusConflict || e.Size == nil || *e.Size != 12 {
		t.Fatalf("append past the end: err = %v, want 409 OffsetGap with size 12", err)
	}
	if log := f.runLog(t, id, 1); log != "hello world\n" {
		t.Fatalf("log = %q, want %q", log, "hello world\n")
	}
	// Complete, then a late chunk from the claiming runner still lands.
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: id, State: api.StateSucceeded}, nil)
	mustSize(17, 12, "late\n")
	// Another runner of the repository may not write to it.
	other := f.RegisterRunner(t, f.repo, "r2", nil, true)
	if _, err := appendLog(other, id, 1, 17, "x"); !api.IsError(err, api.ErrForbidden) {
		t.Errorf("append by a runner that does not hold the run: err = %v, want Forbidden", err)
	}
}

// TestAppendLog_BodiesOfKnownAndUnknownLengthAndOverTheLimit pins both
// ways a body is read (in one go when its length is known, in pieces when
// it is chunked), across buffers reused from one request to the next, and
// that a body over the limit is refused whole (413) and stores nothing.
func TestAppendLog_BodiesOfKnownAndUnknownLengthAndOverTheLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	send := func(offset int64, body io.Reader) (int64, error) {
		resp, err := r.Client.Do(context.Background(), http.MethodPost, api.MethodAppendLog,
			url.Values{"run": {fmt.Sprint(id)}, "step": {"1"}, "offset": {fmt.Sprint(offset)}},
			"application/octet-stream", body)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var out api.AppendLogOutput
		return out.Size, json.NewDecoder(resp.Body).Decode(&out)
	}
	var want strings.Builder
	for i, n := range []int{3 << 20, 100, 1 << 20, 70 << 10, 5 << 20} {
		chunk := strings.Repeat(string(rune('a'+i)), n)
		body := io.Reader(strings.NewReader(chunk)) // Content-Length set
		if i%2 == 1 {
			body = io.MultiReader(body) // length unknown: chunked
		}
		size, err := send(int64(want.Len()), body)
		want.WriteString(chunk)
		if err != nil || size != int64(want.Len()) {
			t.Fatalf("chunk %d (%d bytes): size %d, err %v; want size %d", i, n, size, err, want.Len())
		}
	}
	if log := f.runLog(t, id, 1); log != want.String() {
		t.Fatalf("the log differs from what was sent (%d bytes, want %d)", len(log), want.Len())
	}
	for _, body := range []io.Reader{strings.NewReader(strings.Repeat("x", 8<<20+1)), io.MultiReader(strings.NewReader(strings.Repeat("x", 8<<20+1)))} {
		_, err := send(int64(want.Len()), body)
		var e *api.Error
		if !errorAs(err, &e) || e.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("a body over 8 MiB: err %v, want 413", err)
		}
	}
	if log := f.runLog(t, id, 1); len(log) != want.Len() {
		t.Fatalf("a refused body stored bytes: the log has %d, want %d", len(log), want.Len())
	}
}

// sizedPipe is a request body of a declared length (Content-Length) that
// arrives as the test writes it.
type sizedPipe struct {
	*io.PipeReader
	size int64
}

func (p sizedPipe) Size() int64 { return p.size }

// TestAppendLog_ChunkIsWrittenAsItArrivesNotAfterItsLastByte pins that the
// server writes a log chunk piece by piece while its body arrives: it used
// to read a whole chunk (up to 8 MiB) into memory first, and copying 8 MiB
// from memory into the file cost it several times what the copies of a
// piece still in the CPU's cache do. While the body waits halfway, the
// pieces already read are in the log (readable) and another log of the run
// takes appends (no lock held across the network); a body cut off keeps
// its whole pieces, and the runner's resend of the chunk from its offset
// completes the log without a byte twice.
func TestAppendLog_ChunkIsWrittenAsItArrivesNotAfterItsLastByte(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	const size, first, piece = 1 << 20, 600 << 10, 256 << 10
	chunk := make([]byte, size)
	for i := range chunk {
		chunk[i] = byte('a' + i/1000%26)
	}
	pr, pw := io.Pipe()
	sent := make(chan error, 1)
	go func() {
		_, err := r.Client.Do(context.Background(), http.MethodPost, api.MethodAppendLog,
			url.Values{"run": {fmt.Sprint(id)}, "step": {"1"}, "offset": {"0"}},
			"application/octet-stream", sizedPipe{pr, size})
		sent <- err
	}()
	if _, err := pw.Write(chunk[:first]); err != nil {
		t.Fatal(err)
	}
	// Two whole pieces have arrived; the rest of the body has not.
	testwait.For(t, 10*time.Second, "the first pieces of a chunk whose body is still arriving are in the log", func() bool {
		return len(f.runLog(t, id, 1)) == 2*piece
	})
	if got := f.runLog(t, id, 1); got != string(chunk[:2*piece]) {
		t.Fatalf("the log holds %d bytes that differ from the chunk's first %d", len(got), 2*piece)
	}
	if n, err := appendLog(r, id, 2, 0, "beside\n"); err != nil || n != 7 {
		t.Fatalf("append to step 2 while step 1's body waits: size %d, err %v", n, err)
	}
	pw.CloseWithError(errors.New("connection cut"))
	if err := <-sent; err == nil {
		t.Fatal("a request whose body broke off succeeded")
	}
	// The client learns of the cut before the server's handler has ended:
	// the step its first bytes made known is listed, with them, soon.
	testwait.Until(t, 10*time.Second, "step 1 listed with the bytes of its whole pieces", func() (bool, string) {
		var run api.Run
		if err := f.alice().Query(context.Background(), api.MethodGetRun, url.Values{"run": {fmt.Sprint(id)}}, &run); err != nil {
			return false, err.Error()
		}
		i := slices.IndexFunc(run.Steps, func(s api.Step) bool { return s.Index == 1 })
		return i >= 0 && run.Steps[i].LogSize == 2*piece, fmt.Sprintf("steps %+v", run.Steps)
	})
	if got := len(f.runLog(t, id, 1)); got != 2*piece {
		t.Fatalf("after the body broke off the log holds %d bytes, want its %d of whole pieces", got, 2*piece)
	}
	resp, err := r.Client.Do(context.Background(), http.MethodPost, api.MethodAppendLog,
		url.Values{"run": {fmt.Sprint(id)}, "step": {"1"}, "offset": {"0"}},
		"application/octet-stream", bytes.NewReader(chunk))
	if err != nil {
		t.Fatalf("resend the chunk: %v", err)
	}
	var out api.AppendLogOutput
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Size != size {
		t.Fatalf("resend the chunk: size %d, err %v; want %d", out.Size, err, size)
	}
	resp.Body.Close()
	if got := f.runLog(t, id, 1); got != string(chunk) {
		t.Fatalf("the log after the resend (%d bytes) differs from the chunk (%d)", len(got), size)
	}
}

func TestComplete_RecordedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	ctx := context.Background()
	one := 1
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, Name: "build", State: api.StepRunning}, nil)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, Name: "build", State: api.StepFailed, ExitCode: &one, Reason: api.ReasonExitCode}, nil)
	// A late duplicate "running" must not undo the final step state.
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, State: api.StepRunning}, nil)
	final := api.CompleteInput{Run: c.Run.ID, State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: &one}
	procedure(t, r, api.MethodComplete, final, nil)
	procedure(t, r, api.MethodComplete, final, nil) // same again: fine
	err := r.Client.Procedure(ctx, api.MethodComplete, api.CompleteInput{Run: c.Run.ID, State: api.StateSucceeded}, nil)
	if !api.IsError(err, api.ErrRunFinished) {
		t.Fatalf("a different final state: err = %v, want RunFinished", err)
	}
	var run api.Run
	if err := f.alice().Query(ctx, api.MethodGetRun, url.Values{"run": {itoa(c.Run.ID)}}, &run); err != nil {
		t.Fatal(err)
	}
	if run.State != api.StateFailed || run.ExitCode == nil || *run.ExitCode != 1 || run.StartedAt == nil || run.FinishedAt == nil {
		t.Fatalf("run = %+v, want failed with exit 1, started and finished", run)
	}
	if len(run.Steps) != 1 || run.Steps[0].State != api.StepFailed || run.Steps[0].Name != "build" {
		t.Fatalf("steps = %+v, want step 1 build failed", run.Steps)
	}
}

func TestGetLog_WaitReturnsWhenBytesArrive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	type answer struct {
		body       string
		size, done string
		err        error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := f.alice().Do(context.Background(), http.MethodGet, api.MethodGetRunLog,
			url.Values{"run": {itoa(id)}, "step": {"1"}, "offset": {"0"}, "wait": {"30"}}, "", nil)
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- answer{string(b), resp.Header.Get(api.LogSizeHeader), resp.Header.Get(api.LogDoneHeader), err}
	}()
	testwait.For(t, 10*time.Second, "the request to wait for the log", func() bool { return f.RunWatched(id) })
	start := time.Now()
	if _, err := appendLog(r, id, 1, 0, "first bytes\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if a.err != nil || a.body != "first bytes\n" || a.size != "12" || a.done != "false" {
			t.Fatalf("getLog = %+v, want the 12 new bytes, not done", a)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("getLog answered %s after the bytes arrived", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("getLog with wait did not return when bytes arrived")
	}
	// From the end of a finished step: done at once, no bytes.
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, State: api.StepSucceeded}, nil)
	resp, err := f.alice().Do(context.Background(), http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {itoa(id)}, "step": {"1"}, "offset": {"12"}, "wait": {"30"}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := readBody(t, resp)
	if b != "" || resp.Header.Get(api.LogDoneHeader) != "true" {
		t.Fatalf("getLog at the end of a done step: %q done=%s", b, resp.Header.Get(api.LogDoneHeader))
	}
}

func TestRestart_RunSurvivesAndCompletesWithWholeLog(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: 2 * time.Second})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, Name: "build", State: api.StepRunning}, nil)
	if _, err := appendLog(r, id, 1, 0, "before restart\n"); err != nil {
		t.Fatal(err)
	}
	f.Stop()
	// Down for longer than the lease: the runner cannot renew meanwhile.
	time.Sleep(2500 * time.Millisecond)
	f.Restart()
	var run api.Run
	if err := f.alice().Query(context.Background(), api.MethodGetRun, url.Values{"run": {itoa(id)}}, &run); err != nil {
		t.Fatal(err)
	}
	if run.State != api.StateRunning {
		t.Fatalf("after restart the run is %s/%s %q, want running (lease extended at start)", run.State, run.Reason, run.Message)
	}
	var hb api.HeartbeatOutput
	procedure(t, r, api.MethodHeartbeat, api.HeartbeatInput{Run: id}, &hb)
	if _, err := appendLog(r, id, 1, 15, "after restart\n"); err != nil {
		t.Fatal(err)
	}
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, State: api.StepSucceeded}, nil)
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: id, State: api.StateSucceeded}, nil)
	if log := f.runLog(t, id, 1); log != "before restart\nafter restart\n" {
		t.Fatalf("log = %q, want both halves", log)
	}
	run = f.WaitRun(t, id, 5*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	if run.State != api.StateSucceeded {
		t.Fatalf("run = %s/%s, want succeeded", run.State, run.Reason)
	}
}

func TestRuns_OnlyOwnerOrAdminSeesThem(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	run := queueOne(t, f, "")
	bob := f.Client(f.CreateAccount(t, "bob"))
	ctx := context.Background()
	if err := bob.Query(ctx, api.MethodGetRun, url.Values{"run": {itoa(run.ID)}}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Errorf("get run by another account: err = %v, want NotFound", err)
	}
	if err := bob.Query(ctx, api.MethodGetRunLog, url.Values{"run": {itoa(run.ID)}}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Errorf("get log by another account: err = %v, want NotFound", err)
	}
	if err := bob.Procedure(ctx, api.MethodCancelRun, api.RunRef{Run: run.ID}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Errorf("cancel by another account: err = %v, want NotFound", err)
	}
	var list api.ListRunsOutput
	if err := bob.Query(ctx, api.MethodListRuns, nil, &list); err != nil || len(list.Runs) != 0 {
		t.Errorf("bob's run list = %+v, %v; want empty", list.Runs, err)
	}
	if err := f.Admin().Query(ctx, api.MethodListRuns, url.Values{"pipeline": {itoa(run.Pipeline)}}, &list); err != nil || len(list.Runs) != 1 {
		t.Errorf("admin's list of the pipeline = %+v, %v; want the run", list.Runs, err)
	}
}

func TestShutdown_EndsLongPollsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	done := make(chan error, 1)
	go func() {
		var out api.ClaimOutput
		err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: 60}, &out)
		if err == nil && out.Run != nil {
			err = fmt.Errorf("claimed run %d from nothing", out.Run.Run.ID)
		}
		done <- err
	}()
	testwait.For(t, 10*time.Second, "the claim to wait", func() bool { return f.ClaimStats().Waiting == 1 })
	start := time.Now()
	f.Stop()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown took %s with a long poll in flight", d)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("long poll during shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long poll still open after shutdown")
	}
}

// Another account got 403 "run 1 belongs to alice/app" for a run that
// exists and 404 "no run 9999" for one that does not, and the same split
// for repositories over XRPC and git (a new-user trial): which names and
// run numbers exist could be probed. Both now get the same 404.
func TestRuns_AnotherAccountCannotTellAnExistingRunOrRepositoryFromAMissingOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	run := queueOne(t, f, "")
	bobToken := f.CreateAccount(t, "bob")
	bob := f.Client(bobToken)
	ctx := context.Background()
	answer := func(err error) string {
		var e *api.Error
		if !errors.As(err, &e) {
			return fmt.Sprintf("not an API error: %v", err)
		}
		return fmt.Sprintf("%d %s", e.Status, e.Name)
	}
	for _, c := range []struct {
		what            string
		exists, missing error
	}{
		{"get run",
			bob.Query(ctx, api.MethodGetRun, url.Values{"run": {itoa(run.ID)}}, nil),
			bob.Query(ctx, api.MethodGetRun, url.Values{"run": {"9999"}}, nil)},
		{"list runs of a repository",
			bob.Query(ctx, api.MethodListRuns, url.Values{"repo": {f.repo}}, nil),
			bob.Query(ctx, api.MethodListRuns, url.Values{"repo": {"alice/nope"}}, nil)},
		{"list secrets",
			bob.Query(ctx, api.MethodListSecrets, url.Values{"repo": {f.repo}}, nil),
			bob.Query(ctx, api.MethodListSecrets, url.Values{"repo": {"alice/nope"}}, nil)},
	} {
		if a, b := answer(c.exists), answer(c.missing); a != b || !api.IsError(c.exists, api.ErrNotFound) {
			t.Errorf("%s: existing %q, missing %q; want the same NotFound", c.what, a, b)
		}
	}
	out1, _ := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, bobToken))
	out2, _ := servertest.GitErr(t, "", "ls-remote", f.GitURL("alice/nope", bobToken))
	if strings.ReplaceAll(out1, "app", "X") != strings.ReplaceAll(out2, "nope", "X") {
		t.Errorf("git answers differ:\n%s\n%s", out1, out2)
	}
}
