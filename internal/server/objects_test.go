package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/objstore/s3test"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testwait"
)

// useObjects gives srv the object store at cfg.URL with no delays (tests
// end runs and want them moved at once), stopped when the test ends.
func useObjects(t *testing.T, srv *servertest.Server, cfg objstore.Config, hook func(int64, string) error) {
	t.Helper()
	b, err := objstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := server.ObjectStore{Bucket: b, Every: 50 * time.Millisecond, Delay: server.NoDelay, RemoveAfter: server.NoDelay,
		FullEvery: 200 * time.Millisecond}
	if hook != nil {
		server.SetObjectStoreHook(&c, hook)
	}
	stop, err := srv.UseObjectStore(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// movableRun runs a run through a runner: a setup log, a step log of many
// lines with line times, an outputs archive; then completes it. It
// returns the run's id.
func movableRun(t *testing.T, f *fixture) int64 {
	t.Helper()
	r, c := claimedRun(t, f)
	id := c.Run.ID
	appendTimed(t, r, id, api.SetupStep, 0, "setup: image pulled\n", nil)
	var log strings.Builder
	var times []api.LineTime
	for i := range 200 {
		times = append(times, api.LineTime{Offset: int64(log.Len()), UnixMS: 1_700_000_000_000 + int64(i)*250})
		fmt.Fprintf(&log, "line %03d of the build, \x1b[32mgreen\x1b[0m and some more text\n", i)
	}
	appendTimed(t, r, id, 1, 0, log.String()[:3000], times[:sort.Search(len(times), func(i int) bool { return times[i].Offset >= 3000 })])
	rest := times[sort.Search(len(times), func(i int) bool { return times[i].Offset >= 3000 }):]
	appendTimed(t, r, id, 1, 3000, log.String()[3000:], rest)
	a := testArchive(t, 300_000)
	if out, err := upload(r.Client, id, 0, int64(len(a)), sha(a), a); err != nil || !out.Stored {
		t.Fatalf("upload outputs: %+v, %v", out, err)
	}
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, Name: "build", State: api.StepSucceeded}, nil)
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: id, State: api.StateSucceeded}, nil)
	return id
}

// appendTimed appends data at offset of run's step log with line times
// (offsets ascending, within the data).
func appendTimed(t *testing.T, r *servertest.Runner, run int64, step int, offset int64, data string, times []api.LineTime) {
	t.Helper()
	q := url.Values{"run": {itoa(run)}, "step": {fmt.Sprint(step)}, "offset": {itoa(offset)}}
	if len(times) > 0 {
		q.Set(api.LogTimesParam, api.FormatLineTimes(times))
	}
	resp, err := r.Client.Do(context.Background(), http.MethodPost, api.MethodAppendLog, q, "application/octet-stream", strings.NewReader(data))
	if err != nil {
		t.Fatalf("append log: %v", err)
	}
	resp.Body.Close()
}

// runReads is every way a person reads an ended run's logs and outputs,
// through srv's HTTP API and web pages, as one text per read (status,
// the headers that carry meaning, body): the XRPC log whole, ranges and
// a follow (wait) of each step; the run's steps with their log sizes;
// the outputs archive whole, in ranges, conditional; the web's log parts,
// raw logs, and the run's event stream (log text with line times, from
// the start and from an offset).
func runReads(t *testing.T, srv, token string, run int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	c := withToken(srv, token)
	for _, step := range []int{api.SetupStep, 1, 2} {
		for _, q := range []string{"offset=0", "offset=7", "offset=4000", "offset=99999", "offset=100&wait=5"} {
			v, _ := url.ParseQuery(q)
			v.Set("run", itoa(run))
			v.Set("step", fmt.Sprint(step))
			out[fmt.Sprintf("getLog step %d %s", step, q)] = doRead(t, c, http.MethodGet, api.MethodGetRunLog, v, nil, api.LogSizeHeader, api.LogDoneHeader)
		}
	}
	var r api.Run
	if err := c.Query(context.Background(), api.MethodGetRun, url.Values{"run": {itoa(run)}}, &r); err != nil {
		t.Fatal(err)
	}
	for _, st := range r.Steps {
		out[fmt.Sprintf("getRun step %d", st.Index)] = fmt.Sprintf("%s %d", st.State, st.LogSize)
	}
	for _, rg := range []string{"", "bytes=0-0", "bytes=1000-1999", "bytes=-50", "bytes=290000-", "bytes=0-10,20-30"} {
		h := http.Header{}
		if rg != "" {
			h.Set("Range", rg)
		}
		out["getOutputs "+rg] = doRead(t, c, http.MethodGet, api.MethodGetOutputs, url.Values{"run": {itoa(run)}}, h,
			api.OutputsSHA256Header, "Content-Range", "Content-Length", "ETag")
	}
	b := signedIn(t, srv, token)
	for _, p := range []string{"/log/1", "/log/1?from=3000", "/log/1/raw", "/log/0/raw", "/outputs.tar", "/events", "/events?from=1:2500,0:3"} {
		code, body := b.get(fmt.Sprintf("/-/runs/%d%s", run, p))
		out["web "+p] = fmt.Sprintf("%d %s", code, body)
	}
	return out
}

// doRead makes one request and returns its status, the named headers and
// its body as text.
func doRead(t *testing.T, c *api.Client, method, nsid string, q url.Values, h http.Header, headers ...string) string {
	t.Helper()
	req, _ := http.NewRequest(method, c.URL(nsid, q), nil)
	for k, v := range h {
		req.Header[k] = v
	}
	if err := c.Auth(req, nsid); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %v: %v", nsid, q, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d", resp.StatusCode)
	for _, k := range headers {
		fmt.Fprintf(&b, " %s=%q", k, resp.Header.Get(k))
	}
	if resp.StatusCode == http.StatusMultiStatus || strings.HasPrefix(resp.Header.Get("Content-Type"), "multipart/") {
		body = nil // multipart boundaries are random
	}
	fmt.Fprintf(&b, "\n%s", body)
	return b.String()
}

// sameReads fails the test for each read whose answer differs.
func sameReads(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d reads, want %d", what, len(got), len(want))
	}
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%s: %s differs:\n got %.300q\nwant %.300q", what, k, g, w)
		}
	}
}

// waitMoved waits until run's logs and outputs are out of DATA (the
// mover removed them after recording the move).
func waitMoved(t *testing.T, dataDir string, run int64) {
	t.Helper()
	testwait.For(t, 30*time.Second, "the run's logs and outputs to leave DATA", func() bool {
		return !exists(filepath.Join(dataDir, server.LogsDir, itoa(run))) && !exists(filepath.Join(dataDir, server.OutputsDir, itoa(run), "outputs.tar"))
	})
}

// objectsOf lists the bucket's objects under prefix with their sizes.
func objectsOf(t *testing.T, b *objstore.Bucket, prefix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for o, err := range b.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		out[o.Name] = o.Size
	}
	return out
}

// Every read of an ended run's logs (whole, ranges, a follow, the sizes,
// the web's parts, raw logs and event stream with line times) and of its
// outputs (whole, ranges) answers the same, byte for byte, before and
// after the move to the bucket; the bytes are then in the bucket under
// logs/RUN and outputs/RUN, and no longer in DATA. The failure it pins: a
// moved log read as empty, a range or a line's time off, a 404 for moved
// outputs.
func TestObjects_ReadsOfAMovedRunAnswerTheSameAsBefore(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	f := newFixture(t, servertest.Options{})
	id := movableRun(t, f)
	before := runReads(t, f.URL, f.token, id)
	if !strings.Contains(before["getLog step 1 offset=0"], "line 199") || !strings.Contains(before["web /events"], `"times":[[`) {
		t.Fatalf("the reads before the move miss the log or its line times:\n%.500s\n%.500s", before["getLog step 1 offset=0"], before["web /events"])
	}
	useObjects(t, f.Server, s3.Config("ci"), nil)
	waitMoved(t, f.DataDir, id)
	sameReads(t, "after the move", before, runReads(t, f.URL, f.token, id))
	got := objectsOf(t, s3.Open(t, "ci"), "")
	for _, name := range []string{"logs/%d/0.log", "logs/%d/1.log", "logs/%d/1.times", "outputs/%d/outputs.tar"} {
		if got[fmt.Sprintf(name, id)] == 0 {
			t.Errorf("bucket has no %s: %v", fmt.Sprintf(name, id), got)
		}
	}
	if moved, failed := f.ObjectMoves(); moved != 1 || failed != 0 {
		t.Errorf("ObjectMoves = %d moved, %d failed; want 1, 0", moved, failed)
	}
}

// A replica that did not move the run reads it from the bucket the same
// as the one that did, and as both did before the move (PostgreSQL, one
// data directory). The failure it pins: a replica that looks only in its
// own memory for where a log went.
func TestObjects_TheOtherReplicaReadsAMovedRunTheSame(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	a, b := replicas(t, servertest.Options{})
	id := movableRun(t, a)
	beforeA, beforeB := runReads(t, a.URL, a.token, id), runReads(t, b.URL, a.token, id)
	sameReads(t, "replica B before the move", beforeA, beforeB)
	useObjects(t, a.Server, s3.Config("ci"), nil)
	useObjects(t, b, s3.Config("ci"), nil)
	waitMoved(t, a.DataDir, id)
	sameReads(t, "replica A after the move", beforeA, runReads(t, a.URL, a.token, id))
	sameReads(t, "replica B after the move", beforeA, runReads(t, b.URL, a.token, id))
	if ma, _ := a.ObjectMoves(); ma+func() int64 { mb, _ := b.ObjectMoves(); return mb }() != 1 {
		t.Errorf("moves recorded by A and B together: want 1 (one mover at a time)")
	}
}

var errCrash = errors.New("crashed (test hook)")

// A replica that dies after uploading, or after recording the move, loses
// nothing: reads answer the same meanwhile, and a new server finishes the
// move (no second record, local files removed). The failure it pins: a
// record without its objects, or local files left for ever.
func TestObjects_AMoveCutShortByACrashIsFinishedByTheNextServer(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"uploaded", "recorded", "removed"} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			s3 := s3test.Start(t)
			f := newFixture(t, servertest.Options{})
			id := movableRun(t, f)
			before := runReads(t, f.URL, f.token, id)
			// The mover stops dead after stage, as a killed replica would,
			// until the test ends or the server closes (Close waits for
			// its mover).
			crashed, dead := make(chan struct{}), make(chan struct{})
			closing := server.Closing(f.Server.Server)
			var crashOnce sync.Once
			useObjects(t, f.Server, s3.Config("ci"), func(run int64, st string) error {
				if st != stage {
					return nil
				}
				crashOnce.Do(func() { close(crashed) })
				select {
				case <-dead:
				case <-closing:
				}
				return errCrash
			})
			t.Cleanup(func() { close(dead) })
			<-crashed
			sameReads(t, "after the crash", before, runReads(t, f.URL, f.token, id))
			if stage != "removed" && !exists(filepath.Join(f.DataDir, server.LogsDir, itoa(id), "1.log")) {
				t.Fatalf("the log left DATA although the move stopped after %s", stage)
			}
			f.Restart()
			useObjects(t, f.Server, s3.Config("ci"), nil)
			waitMoved(t, f.DataDir, id)
			sameReads(t, "after the next server finished the move", before, runReads(t, f.URL, f.token, id))
		})
	}
}

// The store killed in the middle of uploading a run's bytes leaves the
// run's logs and outputs whole in DATA, read as before; once the store is
// back the move is done. A store that is down fails neither a run's
// completion nor a read of its logs. The failure it pins: a half-uploaded
// log recorded as moved, or a run that cannot complete while the bucket
// is away.
func TestObjects_TheStoreKilledMidUploadLeavesTheRunWholeAndTheMoveIsRetried(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	p := s3test.NewProxy(t, s3)
	f := newFixture(t, servertest.Options{})
	first := movableRun(t, f)
	before := runReads(t, f.URL, f.token, first)
	p.AfterBytes(100_000, s3.Kill) // inside the outputs archive
	cfg := s3.Config("ci")
	cfg.URL, cfg.Retries, cfg.Timeout = p.BucketURL(s3, "ci"), 1, 2*time.Second
	useObjects(t, f.Server, cfg, nil)
	testwait.For(t, 30*time.Second, "a failed move", func() bool { _, failed := f.ObjectMoves(); return failed > 0 })
	if !exists(filepath.Join(f.DataDir, server.OutputsDir, itoa(first), "outputs.tar")) {
		t.Fatal("the outputs left DATA although the store died mid-upload")
	}
	sameReads(t, "with the store dead", before, runReads(t, f.URL, f.token, first))

	second := movableRunAgain(t, f)
	if got := f.runLog(t, second, 1); !strings.Contains(got, "line 199") {
		t.Fatalf("log of a run that ended with the store down: %.200q", got)
	}
	s3.Restart(t)
	waitMoved(t, f.DataDir, first)
	waitMoved(t, f.DataDir, second)
	sameReads(t, "after the retried move", before, runReads(t, f.URL, f.token, first))
}

// movableRunAgain is movableRun for a fixture whose runner r1 exists.
func movableRunAgain(t *testing.T, f *fixture) int64 {
	t.Helper()
	r := f.RegisterRunner(t, f.repo, "r2", nil, true)
	queueOneMore(t, f)
	c := claim(t, r, 0)
	if c == nil {
		t.Fatal("no run claimed")
	}
	id := c.Run.ID
	appendTimed(t, r, id, 1, 0, strings.Repeat("line 199\n", 10), nil)
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: id, State: api.StateSucceeded}, nil)
	return id
}

// queueOneMore pushes a new commit that queues one more run.
func queueOneMore(t *testing.T, f *fixture) {
	t.Helper()
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/any.yml": queuedWorkflow(""), "more": time.Now().String()})
	f.push(t, dir, "+HEAD:refs/heads/other")
}

// removeRunBytes removes a moved run's bytes from the bucket and one not
// moved from DATA; the run's record stays, its logs then read empty and
// its outputs as no longer stored. The failure it pins: retention that
// leaves the bucket's copies behind.
func TestObjects_RemoveRunBytesRemovesTheRunsBytesWhereverTheyAre(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	f := newFixture(t, servertest.Options{})
	moved := movableRun(t, f)
	useObjects(t, f.Server, s3.Config("ci"), nil)
	waitMoved(t, f.DataDir, moved)
	bucket := s3.Open(t, "ci")
	if len(objectsOf(t, bucket, fmt.Sprintf("logs/%d/", moved))) == 0 {
		t.Fatal("nothing moved")
	}
	if err := server.RemoveRunBytes(context.Background(), f.Server.Server, moved); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"logs/%d/", "outputs/%d/"} {
		if got := objectsOf(t, bucket, fmt.Sprintf(prefix, moved)); len(got) != 0 {
			t.Errorf("bucket still holds %v", got)
		}
	}
	if got := f.runLog(t, moved, 1); got != "" {
		t.Errorf("log after removal = %.100q, want empty", got)
	}
	resp, _, err := getOutputs(f.alice(), moved, nil)
	if err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("outputs after removal: %v, %v; want 404", resp.Status, err)
	}
	if err := server.RemoveRunBytes(context.Background(), f.Server.Server, moved); err != nil {
		t.Errorf("a second removal: %v", err)
	}
}

// A moved run's logs and outputs read while the store is down answer 503
// with the store's reason (XRPC: the API's error; web downloads: plain
// text), never a 200 whose body is cut short; once the store is back the
// same reads answer the bytes as before. The failure it pins: a 200 with
// the full Content-Length and an empty body, which the CLI reported as
// "log transfer interrupted: unexpected EOF".
func TestObjects_AReadWhileTheStoreIsDownIsA503WithTheStoresReason(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	f := newFixture(t, servertest.Options{})
	id := movableRun(t, f)
	before := runReads(t, f.URL, f.token, id)
	cfg := s3.Config("ci")
	cfg.Retries, cfg.Timeout = 1, 2*time.Second
	useObjects(t, f.Server, cfg, nil)
	waitMoved(t, f.DataDir, id)
	s3.Kill()
	c := withToken(f.URL, f.token)
	run := url.Values{"run": {itoa(id)}}
	log := url.Values{"run": {itoa(id)}, "step": {"1"}, "offset": {"0"}}
	b := signedIn(t, f.URL, f.token)
	reads := map[string]func() (int, string){
		"getLog": func() (int, string) {
			return status(doRead(t, c, http.MethodGet, api.MethodGetRunLog, log, nil))
		},
		"getOutputs": func() (int, string) {
			return status(doRead(t, c, http.MethodGet, api.MethodGetOutputs, run, nil))
		},
		"web raw log":     func() (int, string) { return b.get(fmt.Sprintf("/-/runs/%d/log/1/raw", id)) },
		"web outputs.tar": func() (int, string) { return b.get(fmt.Sprintf("/-/runs/%d/outputs.tar", id)) },
	}
	for what, read := range reads {
		code, body := read()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "object store") {
			t.Errorf("%s with the store down: %d %.300q; want 503 with the store's reason", what, code, body)
		}
		if strings.HasPrefix(what, "get") && !strings.Contains(body, `"ObjectStoreUnavailable"`) {
			t.Errorf("%s with the store down: %.300q; want the API's error shape", what, body)
		}
	}
	s3.Restart(t)
	after := runReads(t, f.URL, f.token, id)
	for _, k := range []string{"getLog step 1 offset=0", "getLog step 0 offset=7", "getOutputs ", "web /log/1/raw", "web /outputs.tar"} {
		if after[k] != before[k] {
			t.Errorf("%s after the store came back differs:\n got %.300q\nwant %.300q", k, after[k], before[k])
		}
	}
}

// status splits doRead's text into its status and the rest.
func status(read string) (int, string) {
	var code int
	fmt.Sscanf(read, "%d", &code)
	return code, read
}

// While the store is down the mover backs off (from 2×Every, doubling)
// and each failed pass warns once, saying how many runs wait; once the
// store is back the run is moved. The failure it pins: the same WARN every
// 5 seconds for ever, naming only the oldest run, the store hammered
// without pause.
func TestObjects_TheMoverBacksOffWhileTheStoreIsDownAndSaysHowManyRunsWait(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	logs := &logSink{}
	f := newFixture(t, servertest.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	id := movableRun(t, f)
	s3.Kill()
	cfg := s3.Config("ci")
	cfg.Retries, cfg.Timeout = 1, 2*time.Second
	useObjects(t, f.Server, cfg, nil) // a pass every 50 ms: 60 in 3 s without a backoff
	time.Sleep(3 * time.Second)
	var warns []string
	for _, l := range logs.lines() {
		if strings.Contains(l, "the object store failed") {
			warns = append(warns, l)
		}
	}
	if len(warns) < 2 || len(warns) > 8 {
		t.Fatalf("%d warnings in 3 s with the store down; want 2..8 (passes backing off from 100 ms):\n%s", len(warns), strings.Join(warns, "\n"))
	}
	if !strings.Contains(warns[0], "runs_waiting=1") || !strings.Contains(warns[0], fmt.Sprintf("run=%d", id)) {
		t.Errorf("warning %q: want the run and runs_waiting=1", warns[0])
	}
	s3.Restart(t)
	waitMoved(t, f.DataDir, id)
}
