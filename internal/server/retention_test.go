package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/objstore/s3test"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/postgres/pgtest"
)

const day = 24 * time.Hour

// endedRun has runner r claim the fixture's queued run, write "old
// line\n" to step 1 and outputs, and complete it succeeded reporting the
// repository's caches.
func endedRun(t *testing.T, f *fixture, r *servertest.Runner) int64 {
	t.Helper()
	c := claim(t, r, 0)
	if c == nil {
		t.Fatal("no run claimed")
	}
	id := c.Run.ID
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, Name: "build", State: api.StepRunning}, nil)
	if _, err := appendLog(r, id, 1, 0, "old line\n"); err != nil {
		t.Fatal(err)
	}
	archive := testArchive(t, 64)
	if out, err := upload(r.Client, id, 0, int64(len(archive)), sha(archive), archive); err != nil || !out.Stored {
		t.Fatalf("upload outputs: %+v, %v", out, err)
	}
	exit := 0
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, Name: "build", State: api.StepSucceeded, ExitCode: &exit}, nil)
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: id, State: api.StateSucceeded, ExitCode: &exit,
		Caches: &api.CacheUsage{Store: "s3: store.test/knotless/ci", Entries: 2, Bytes: 2048}}, nil)
	return id
}

// runningRun pushes another branch and has r claim its run and write
// "live line\n" to step 1; the run stays running.
func runningRun(t *testing.T, f *fixture, r *servertest.Runner) int64 {
	t.Helper()
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/any.yml": queuedWorkflow("")})
	f.push(t, dir, "main:refs/heads/dev")
	c := claim(t, r, 5)
	if c == nil {
		t.Fatal("no second run claimed")
	}
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, Name: "build", State: api.StepRunning}, nil)
	if _, err := appendLog(r, c.Run.ID, 1, 0, "live line\n"); err != nil {
		t.Fatal(err)
	}
	return c.Run.ID
}

// logErr reads a step's log and returns the API's error (nil: read).
func logErr(f *fixture, run int64, step int) error {
	resp, err := f.alice().Do(context.Background(), http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {fmt.Sprint(step)}}, "", nil)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// A run past the rules loses its log, line times and outputs, and every
// place a person looks says when: the log API (410 LogsExpired), the
// outputs API, the run page (no raw log link, "Logs expired on"); its
// record, result and steps stay, and a running run's log is untouched.
// Pins: an expired run answering an empty log or a 404, or retention
// reaching a run still being written.
func TestRetention_ExpiredRunSaysWhenEverywhereAndARunningRunIsUntouched(t *testing.T) {
	t.Parallel()
	clock := &servertest.Clock{}
	f := newFixture(t, servertest.Options{Clock: clock})
	queueOne(t, f, "")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	old := endedRun(t, f, r)
	live := runningRun(t, f, r)
	ctx := context.Background()
	ret := server.Retention{KeepLogsDays: 2}

	clock.Advance(day)
	if p, err := f.ExpireRuns(ctx, ret); err != nil || !p.Leader || p.Expired != 0 || p.Measured != 1 {
		t.Fatalf("pass a day after the end: %+v, %v; want run %d measured, nothing expired", p, err, old)
	}
	if err := logErr(f, old, 1); err != nil {
		t.Fatalf("log within the 2 days: %v", err)
	}
	clock.Advance(day + time.Minute)
	if p, err := f.ExpireRuns(ctx, ret); err != nil || p.Expired != 1 {
		t.Fatalf("pass 2 days after the end: %+v, %v; want run %d expired", p, err, old)
	}
	var e *api.Error
	if err := logErr(f, old, 1); !errors.As(err, &e) || e.Status != http.StatusGone || e.Name != api.ErrLogsExpired ||
		!strings.Contains(e.Message, "expired on "+clock.Now().UTC().Format("2006-01-02")) {
		t.Fatalf("expired log: %v; want 410 %s saying the date", err, api.ErrLogsExpired)
	}
	if resp, body, err := getOutputs(f.alice(), old, nil); err != nil || resp.StatusCode != http.StatusGone || !strings.Contains(string(body), api.ErrOutputsExpired) {
		t.Fatalf("expired outputs: %v %s, %v; want 410 %s", resp.Status, body, err, api.ErrOutputsExpired)
	}
	if got := f.runLog(t, live, 1); got != "live line\n" {
		t.Fatalf("the running run's log = %q, want it untouched", got)
	}
	for _, p := range []string{filepath.Join(f.DataDir, server.LogsDir, fmt.Sprint(old)), filepath.Join(f.DataDir, server.OutputsDir, fmt.Sprint(old))} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after expiry: %v, want it removed", p, err)
		}
	}
	var run api.Run
	if err := f.alice().Query(ctx, api.MethodGetRun, url.Values{"run": {fmt.Sprint(old)}}, &run); err != nil ||
		run.State != api.StateSucceeded || len(run.Steps) == 0 {
		t.Fatalf("the expired run's record: %+v, %v; want it succeeded with its steps", run, err)
	}
	b := signedIn(t, f.URL, f.token)
	status, page := b.get(fmt.Sprintf("/-/runs/%d", old))
	if status != http.StatusOK || !strings.Contains(page, "Logs expired on ") || !strings.Contains(page, "Outputs expired on ") ||
		strings.Contains(page, "raw log") || strings.Contains(page, "outputs.tar") {
		t.Fatalf("run page %d: want it to say logs and outputs expired, with no raw log or download link:\n%s", status, page)
	}
	if status, page := b.get(fmt.Sprintf("/-/runs/%d", live)); status != http.StatusOK || strings.Contains(page, "expired") {
		t.Fatalf("running run's page %d says expired:\n%s", status, page)
	}
}

// The rules decide with the server's clock: nothing goes before its days
// or within the grace after a run's end, a repository's own rule wins over
// the server's, and only an admin may make a repository keep more than
// the server does. Pins: a newer pipeline expiring a just-ended run's log
// while its runner's last bytes arrive, or an owner lifting the
// operator's bound.
func TestRetention_RulesWaitForTheGraceAndTheRepositoryOwnRuleWins(t *testing.T) {
	t.Parallel()
	clock := &servertest.Clock{}
	f := newFixture(t, servertest.Options{Clock: clock})
	queueOne(t, f, "")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	old := endedRun(t, f, r)
	ctx := context.Background()
	f.StartRetention(server.Retention{KeepLogsDays: 30, Every: time.Hour})() // the server's settings, no sweep
	set := func(c *api.Client, days int) (api.Retention, error) {
		var out api.Retention
		err := c.Procedure(ctx, api.MethodSetRetention, api.SetRetentionInput{Repo: f.repo, KeepLogsDays: &days}, &out)
		return out, err
	}
	var e *api.Error
	if _, err := set(f.alice(), 0); !errors.As(err, &e) || e.Status != http.StatusForbidden || !strings.Contains(e.Message, "--keep-logs-days") {
		t.Fatalf("the owner keeping forever over the server's 30 days: %v, want 403 naming --keep-logs-days", err)
	}
	if out, err := set(f.Admin(), 0); err != nil || out.Effective.KeepLogsDays != 0 || out.SetBy != "admin" {
		t.Fatalf("an admin keeping forever: %+v, %v", out, err)
	}
	out, err := set(f.alice(), 1)
	if err != nil || out.Effective.KeepLogsDays != 1 || out.Server.KeepLogsDays != 30 || out.SetBy != "alice" {
		t.Fatalf("the owner keeping 1 day: %+v, %v", out, err)
	}
	ret := server.Retention{KeepLogsDays: 30, KeepPipelines: 0}
	clock.Advance(30 * time.Minute)
	if p, err := f.ExpireRuns(ctx, ret); err != nil || p.Measured != 0 || p.Expired != 0 {
		t.Fatalf("pass within the grace: %+v, %v; want nothing measured or expired", p, err)
	}
	clock.Advance(day)
	if p, err := f.ExpireRuns(ctx, ret); err != nil || p.Expired != 1 {
		t.Fatalf("pass a day and a half after the end, the repository keeping 1 day: %+v, %v; want run %d expired", p, err, old)
	}
	var u api.RepoUsage
	if err := f.alice().Query(ctx, api.MethodRepoUsage, url.Values{"repo": {f.repo}}, &u); err != nil {
		t.Fatal(err)
	}
	if u.Expired.Runs != 1 || u.Expired.Bytes == 0 || u.Logs.Count != 0 || u.Outputs.Count != 0 || u.Retention.Effective.KeepLogsDays != 1 ||
		len(u.Caches) != 1 || u.Caches[0].Bytes != 2048 || u.Caches[0].Entries != 2 {
		t.Fatalf("usage after expiry: %+v", u)
	}
}

// Usage counts what a repository's runs hold: ended runs from what the
// sweep measured, a running run on demand, outputs, and the latest cache
// report per store. Pins: a usage page that misses the running run's log
// or counts an expired run's bytes.
func TestRetention_UsageCountsLogsOutputsAndCaches(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	queueOne(t, f, "")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	endedRun(t, f, r)
	runningRun(t, f, r)
	ctx := context.Background()
	var u api.RepoUsage
	if err := f.alice().Query(ctx, api.MethodRepoUsage, url.Values{"repo": {f.repo}}, &u); err != nil {
		t.Fatal(err)
	}
	archive := int64(len(testArchive(t, 64)))
	if u.Logs.Count != 2 || u.Logs.Bytes < int64(len("old line\nlive line\n")) || u.Outputs.Count != 1 || u.Outputs.Bytes != archive ||
		len(u.Caches) != 1 || u.Caches[0].Store != "s3: store.test/knotless/ci" || u.Expired.Runs != 0 {
		t.Fatalf("usage %+v: want 2 logs of at least 19 bytes, 1 outputs archive of %d bytes, 1 cache store", u, archive)
	}
	b := signedIn(t, f.URL, f.token)
	status, page := b.get("/" + f.repo + "/-/usage")
	if status != http.StatusOK || !strings.Contains(page, "2 step logs") || !strings.Contains(page, "s3: store.test/knotless/ci") ||
		!strings.Contains(page, "2.0 KiB") || !strings.Contains(page, "Kept forever.") {
		t.Fatalf("usage page %d:\n%s", status, page)
	}
	var e *api.Error
	if err := withToken(f.URL, f.CreateAccount(t, "bob")).Query(ctx, api.MethodRepoUsage, url.Values{"repo": {f.repo}}, &u); !errors.As(err, &e) || e.Status != http.StatusNotFound {
		t.Fatalf("another account's usage query: %v, want 404", err)
	}
}

// A run whose logs and outputs moved to the object store is measured from
// the move's record (its local copies are gone) and expired from the
// bucket. Pins: usage counting a moved run as holding nothing, or
// retention leaving the bucket's copies behind.
func TestRetention_AMovedRunIsMeasuredFromItsMoveAndExpiredFromTheBucket(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	clock := &servertest.Clock{}
	f := newFixture(t, servertest.Options{Clock: clock})
	moved := movableRun(t, f)
	useObjects(t, f.Server, s3.Config("ci"), nil)
	waitMoved(t, f.DataDir, moved)
	bucket := s3.Open(t, "ci")
	clock.Advance(2 * time.Hour)
	ctx := context.Background()
	if p, err := f.ExpireRuns(ctx, server.Retention{}); err != nil || p.Measured != 1 {
		t.Fatalf("measuring pass: %+v, %v", p, err)
	}
	var u api.RepoUsage
	if err := f.alice().Query(ctx, api.MethodRepoUsage, url.Values{"repo": {f.repo}}, &u); err != nil {
		t.Fatal(err)
	}
	if u.Logs.Count != 2 || u.Logs.Bytes < 9000 {
		t.Fatalf("usage of the moved run: logs %+v, want its 2 logs of 9 kB and more as moved", u.Logs)
	}
	clock.Advance(2 * day)
	if p, err := f.ExpireRuns(ctx, server.Retention{KeepLogsDays: 1}); err != nil || p.Expired != 1 {
		t.Fatalf("expiring pass: %+v, %v", p, err)
	}
	for _, prefix := range []string{"logs/%d/", "outputs/%d/"} {
		if got := objectsOf(t, bucket, fmt.Sprintf(prefix, moved)); len(got) != 0 {
			t.Errorf("the bucket still holds %v after expiry", got)
		}
	}
	var e *api.Error
	if err := logErr(f, moved, 1); !errors.As(err, &e) || e.Name != api.ErrLogsExpired {
		t.Fatalf("the moved run's log after expiry: %v, want %s", err, api.ErrLogsExpired)
	}
}

// endedRuns ends n runs of as many new branches through runner r.
func endedRuns(t *testing.T, f *fixture, r *servertest.Runner, n int) {
	t.Helper()
	for i := range n {
		dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/any.yml": queuedWorkflow("")})
		f.push(t, dir, fmt.Sprintf("main:refs/heads/b%d", i))
		endedRun(t, f, r)
	}
}

// Two replicas on one PostgreSQL database expire runs one at a time:
// while the retention lock is held elsewhere neither does anything, and
// passes started on both at once expire each run exactly once between
// them, never two passes holding the lock together. Pins: two replicas
// removing and recording the same runs, or a replica acting while another
// holds the lock.
func TestReplicas_OneRetentionPassAtATimeExpiresEachRunOnce(t *testing.T) {
	pg := pgtest.Start(t)
	clock := &servertest.Clock{}
	opts := servertest.Options{Clock: clock, Database: pg.Database(t)}
	a := newFixture(t, opts)
	opts.DataDir = a.DataDir
	b := servertest.Start(t, opts)
	r := a.RegisterRunner(t, a.repo, "r1", nil, true)
	const n = 6
	endedRuns(t, a, r, n)
	clock.Advance(3 * day)
	ctx := context.Background()
	ret := server.Retention{KeepLogsDays: 1, Batch: 2}

	coord := servertest.OpenStore(t, a.DataDir, opts.Database).(store.Coordinator)
	held, ok, err := coord.TryLock(ctx, store.LockSweeper, 1)
	if err != nil || !ok {
		t.Fatalf("take the retention lock from outside: %v, %v", ok, err)
	}
	for _, s := range []*servertest.Server{a.Server, b} {
		if p, err := s.ExpireRuns(ctx, ret); err != nil || p.Leader || p.Measured+p.Expired != 0 {
			t.Fatalf("pass while another holds the lock: %+v, %v; want nothing done", p, err)
		}
	}
	held.Release()

	var holding, overlaps atomic.Int32
	server.SetRetentionHook(func(in bool) {
		if !in {
			holding.Add(-1)
			return
		}
		if holding.Add(1) > 1 {
			overlaps.Add(1)
		}
		time.Sleep(2 * time.Millisecond) // a wider window for another pass to break in
	})
	t.Cleanup(func() { server.SetRetentionHook(nil) })
	var mu sync.Mutex
	expired := map[string]int{}
	var wg sync.WaitGroup
	for _, s := range []*servertest.Server{a.Server, b, a.Server, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				p, err := s.ExpireRuns(ctx, ret)
				if err != nil {
					t.Errorf("pass on %s: %v", s.URL, err)
					return
				}
				mu.Lock()
				expired[s.URL] += p.Expired
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d passes held the retention lock while another did", n)
	}
	if got := expired[a.URL] + expired[b.URL]; got != n {
		t.Fatalf("runs expired: %v on the two replicas, %d in all; want each of the %d runs once", expired, got, n)
	}
	var u api.RepoUsage
	if err := a.alice().Query(ctx, api.MethodRepoUsage, url.Values{"repo": {a.repo}}, &u); err != nil || u.Expired.Runs != n {
		t.Fatalf("usage: %+v, %v; want %d runs expired", u.Expired, err, n)
	}
}

// The Usage page says a count of one in the singular (an outputs archive
// of one run, a cache store of one entry) and more in the plural. Pins:
// "1 runs" and "1 entries" on the page.
func TestUsage_ACountOfOneIsSingularOnThePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	queueOne(t, f, "")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	endedRun(t, f, r) // 1 step log, outputs of 1 run, a cache store of 2 entries
	b := signedIn(t, f.URL, f.token)
	status, page := b.get("/" + f.repo + "/-/usage")
	if status != http.StatusOK || !strings.Contains(page, ">1 run</td>") || !strings.Contains(page, ">1 step log</td>") ||
		!strings.Contains(page, ">2 entries</td>") || strings.Contains(page, "1 runs") || strings.Contains(page, "1 step logs") {
		t.Fatalf("usage page %d: want 1 run, 1 step log, 2 entries:\n%s", status, page)
	}
}
