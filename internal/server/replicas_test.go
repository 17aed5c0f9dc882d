package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/postgres"
	"knotless.dev/knotless/internal/store/postgres/pgtest"
	"knotless.dev/knotless/internal/testwait"
)

// replicas starts two servers on one new PostgreSQL database and one data
// directory (the shared file system), with alice/app on them; a is the
// fixture the helpers of this package take.
func replicas(t *testing.T, opts servertest.Options) (a *fixture, b *servertest.Server) {
	t.Helper()
	pg := pgtest.Start(t)
	opts.Database = pg.Database(t)
	a = newFixture(t, opts)
	opts.DataDir = a.DataDir
	b = servertest.Start(t, opts)
	return a, b
}

// followLog asks srv for run's step log from offset, waiting up to wait
// seconds for bytes, and returns them.
func followLog(t *testing.T, srv string, token string, run int64, step int, offset int64, wait int) string {
	t.Helper()
	c := withToken(srv, token)
	resp, err := c.Do(context.Background(), http.MethodGet, api.MethodGetRunLog, url.Values{"run": {fmt.Sprint(run)},
		"step": {fmt.Sprint(step)}, "offset": {fmt.Sprint(offset)}, "wait": {fmt.Sprint(wait)}}, "", nil)
	if err != nil {
		t.Errorf("follow the log: %v", err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A log follower long-polling replica A is woken by bytes a runner appends
// through replica B (LISTEN/NOTIFY), not by its own wait running out.
func TestReplicas_LogFollowerOnASeesBytesAppendedThroughB(t *testing.T) {
	a, b := replicas(t, servertest.Options{})
	run := queueOne(t, a, "")
	r := b.RegisterRunner(t, a.repo, "r1", nil, true)
	if c := claim(t, r, 0); c == nil || c.Run.ID != run.ID {
		t.Fatalf("claim through B: %+v", c)
	}
	if _, err := appendLog(r, run.ID, 1, 0, "first\n"); err != nil {
		t.Fatal(err)
	}
	const wait = 30 // seconds: far longer than a woken follower takes
	got := make(chan string, 1)
	start := time.Now()
	go func() { got <- followLog(t, a.URL, a.token, run.ID, 1, 6, wait) }()
	testwait.For(t, 10*time.Second, "the follower to wait on A", func() bool { return a.LogFollowers() > 0 })
	if _, err := appendLog(r, run.ID, 1, 6, "second\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		took := time.Since(start)
		t.Logf("follower on A answered %q %s after the append through B", s, took.Round(time.Millisecond))
		if s != "second\n" {
			t.Fatalf("follower on A read %q, want the bytes appended through B", s)
		}
		if took >= wait*time.Second/2 {
			t.Fatalf("follower on A answered after %s: woken by its own wait running out, not by B's append", took)
		}
	case <-time.After(2 * wait * time.Second):
		t.Fatal("follower on A never answered")
	}
}

// A run queued through replica A wakes a claim long-polling replica B at
// once, and the run is claimed exactly once.
func TestReplicas_RunQueuedThroughAWakesAClaimWaitingOnB(t *testing.T) {
	a, b := replicas(t, servertest.Options{})
	r := b.RegisterRunner(t, a.repo, "r1", nil, true)
	const wait = 30
	got := make(chan *api.ClaimedRun, 1)
	start := time.Now()
	go func() { got <- claim(t, r, wait) }()
	testwait.For(t, 10*time.Second, "the claim to wait on B", func() bool { return b.ClaimStats().Waiting > 0 })
	run := pushOne(t, a, "") // may be claimed by the time the push answers
	c := <-got
	took := time.Since(start)
	if c == nil || c.Run.ID != run.ID {
		t.Fatalf("claim waiting on B after %s: %+v, want run %d", took, c, run.ID)
	}
	if took >= wait*time.Second/2 {
		t.Fatalf("claim on B answered after %s: not woken by the push through A", took)
	}
	if again := claim(t, r, 0); again != nil {
		t.Fatalf("a second claim got run %d", again.Run.ID)
	}
}

// A runner token accepted by replica A is refused when replayed to
// replica B, and by A itself after a restart (the jti is in the
// database, not only in a process's memory).
func TestReplicas_TokenReplayedToTheOtherReplicaOrAfterARestartIsRefused(t *testing.T) {
	a, b := replicas(t, servertest.Options{})
	r := a.RegisterRunner(t, a.repo, "r1", nil, true)
	tok, err := r.Signer.Token(api.MethodClaim)
	if err != nil {
		t.Fatal(err)
	}
	if err := withToken(a.URL, tok, r.Session()).Procedure(context.Background(), api.MethodClaim, api.ClaimInput{}, nil); err != nil {
		t.Fatalf("first use on A: %v", err)
	}
	err = withToken(b.URL, tok, r.Session()).Procedure(context.Background(), api.MethodClaim, api.ClaimInput{}, nil)
	if !api.IsError(err, api.ErrInvalidToken) || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("the token replayed to B: %v, want InvalidToken, already used", err)
	}
	a.Restart()
	err = withToken(a.URL, tok, r.Session()).Procedure(context.Background(), api.MethodClaim, api.ClaimInput{}, nil)
	if !api.IsError(err, api.ErrInvalidToken) || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("the token replayed to A after its restart: %v, want InvalidToken, already used", err)
	}
}

// Of two replicas, one sweeps lapsed leases; when it stops, the other
// takes over, and a run whose runner vanished still ends runner-lost.
func TestReplicas_OneSweeperAtATimeAndTheOtherTakesOver(t *testing.T) {
	a, b := replicas(t, servertest.Options{Lease: time.Second})
	leaders := func() (int, int) { return sweeperLeader(t, a.URL), sweeperLeader(t, b.URL) }
	deadline := time.Now().Add(20 * time.Second)
	la, lb := leaders()
	for la+lb != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling: the first tick takes the lock
		la, lb = leaders()
	}
	if la+lb != 1 {
		t.Fatalf("sweeper leaders: a %d, b %d; want exactly one", la, lb)
	}
	leader, other := a.Server, b
	if lb == 1 {
		leader, other = b, a.Server
	}
	leader.Stop()
	run := queueOne(t, a.withServer(other), "")
	r := other.RegisterRunner(t, a.repo, "r1", nil, true)
	if c := claim(t, r, 0); c == nil || c.Run.ID != run.ID {
		t.Fatalf("claim: %+v", c)
	}
	// The runner vanishes without a heartbeat: the remaining replica's
	// sweeper ends the run once the lease lapses.
	got := other.WaitRun(t, run.ID, 20*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	if got.State != api.StateErrored || got.Reason != api.ReasonRunnerLost {
		t.Fatalf("run after its runner vanished: %s/%s, want errored/runner-lost", got.State, got.Reason)
	}
	if sweeperLeader(t, other.URL) != 1 {
		t.Error("the remaining replica does not report itself the sweeper")
	}
}

// withServer is f on another replica.
func (f *fixture) withServer(s *servertest.Server) *fixture {
	return &fixture{Server: s, token: f.token, repo: f.repo}
}

// sweeperLeader reads knotless_sweeper_leader from srv's /metrics.
func sweeperLeader(t *testing.T, srv string) int {
	t.Helper()
	fams, body := scrape(t, srv)
	v, ok := value(fams, "knotless_sweeper_leader", nil)
	if !ok {
		t.Fatalf("no knotless_sweeper_leader in /metrics:\n%s", body)
	}
	return int(v)
}

// Replicas started at the same moment on a new data directory and an
// empty database: both start, with the same keys (so the same server DID
// and secret key) and one admin account, whoever made them. A key read
// while another replica was still writing it stopped the second (the
// docs' test found it).
func TestReplicas_StartingTogetherOnAFreshDirectoryShareKeysAndAdmin(t *testing.T) {
	pg := pgtest.Start(t)
	for round := range 3 {
		dir, db := t.TempDir(), pg.Database(t)
		servers := make([]*server.Server, 2)
		stores := make([]store.Store, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range servers {
			wg.Go(func() {
				// Each replica opens (and migrates) the database itself, at
				// the same moment, as knotless-server does.
				st, err := postgres.Open(context.Background(), db)
				if err != nil {
					errs[i] = err
					return
				}
				stores[i] = st
				servers[i], errs[i] = server.New(context.Background(), server.Config{DataDir: dir, Store: stores[i],
					Listen: "127.0.0.1:0", URL: "http://127.0.0.1:1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if stores[i] != nil {
				defer stores[i].Close() // after the server's Close, deferred next
			}
			if err != nil {
				t.Fatalf("round %d: replica %d: %v", round, i, err)
			}
			defer servers[i].Close()
		}
		if servers[0].DID() != servers[1].DID() {
			t.Fatalf("round %d: the replicas have different DIDs %s and %s", round, servers[0].DID(), servers[1].DID())
		}
	}
}
