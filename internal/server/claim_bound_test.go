package server_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testwait"
)

// Issue 14, item 9: one approved runner held 10,000 claim long polls
// (436 MiB, 10k fds).
func TestServer_ClaimLongPollsAreBoundedPerRunner(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	fds0 := openFDs(t)
	probe := startLatencyProbe(f.Admin())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const n = 300
	limit := server.DefaultMaxClaimsPerRunner
	var refused atomic.Int64
	var slowest atomic.Int64
	got := make(chan *api.ClaimedRun, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &api.Client{BaseURL: f.URL, Auth: r.Client.Auth,
				HTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
			start := time.Now()
			var out api.ClaimOutput
			err := c.Procedure(ctx, api.MethodClaim, api.ClaimInput{Wait: 30}, &out)
			var e *api.Error
			switch {
			case errorAs(err, &e) && e.Status == http.StatusTooManyRequests && e.Name == api.ErrTooManyClaims:
				refused.Add(1)
				for d := int64(time.Since(start)); ; {
					old := slowest.Load()
					if d <= old || slowest.CompareAndSwap(old, d) {
						break
					}
				}
			case err == nil:
				got <- out.Run
			case ctx.Err() == nil:
				t.Errorf("claim: %v", err)
			}
		}()
	}
	testwait.For(t, 20*time.Second, "all claims past the limit refused", func() bool {
		return refused.Load() == int64(n-limit)
	})
	testwait.For(t, 5*time.Second, "the claims within the limit waiting", func() bool {
		return f.ClaimStats().Waiting == limit
	})
	// What may stay open: both ends of the waiting claims, the database's
	// pool warming up under the load (8 connections, 2 files each) and a
	// few more; a held claim would cost 2 each.
	var fds int
	testwait.For(t, 5*time.Second, "the refused claims' connections closed", func() bool {
		fds = openFDs(t)
		return fds-fds0 <= 2*limit+16+10
	})
	t.Logf("%d claims of one runner: %d refused (slowest refusal %s), %d waiting; fds %d → %d",
		n, refused.Load(), time.Duration(slowest.Load()).Round(time.Millisecond), f.ClaimStats().Waiting, fds0, fds)

	// The claims within the limit still get work.
	run := pushOne(t, f, "")
	select {
	case c := <-got:
		if c == nil || c.Run.ID != run.ID {
			t.Errorf("a waiting claim returned %+v, want run %d", c, run.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no waiting claim got the new run")
	}
	probe.stop(t)
	cancel()
	wg.Wait()
}

// Issue 14, item 9: one new run woke every waiting claim (5.7 s of CPU for
// 10,000).
func TestServer_QueuedRunWakesOneWaitingRunnerNotAll(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	const n = 30
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimedBy := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		var labels []string
		if i == 17 {
			labels = []string{"gpu"}
		}
		r := f.RegisterRunner(t, f.repo, fmt.Sprintf("r%02d", i), labels, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var out api.ClaimOutput
				if err := r.Client.Procedure(ctx, api.MethodClaim, api.ClaimInput{Wait: 30}, &out); err != nil {
					if ctx.Err() == nil {
						t.Errorf("claim of %s: %v", r.Name, err)
					}
					return
				}
				if out.Run != nil {
					claimedBy <- r.Name
					return
				}
			}
		}()
	}
	testwait.For(t, 10*time.Second, "every runner waiting", func() bool { return f.ClaimStats().Waiting == n })
	woken0 := f.ClaimStats().Woken

	// A run only r17 qualifies for wakes r17 alone.
	pushOne(t, f, "runners: [gpu]\n")
	select {
	case name := <-claimedBy:
		if name != "r17" {
			t.Errorf("the gpu run was claimed by %s, want r17", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nobody claimed the gpu run")
	}
	// A run any runner qualifies for wakes one of them.
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/any.yml": queuedWorkflow("")})
	f.push(t, dir, "main:other")
	select {
	case <-claimedBy:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody claimed the second run")
	}
	testwait.For(t, 5*time.Second, "the others waiting again", func() bool { return f.ClaimStats().Waiting == n-2 })
	if w := f.ClaimStats().Woken - woken0; w != 2 {
		t.Errorf("two queued runs woke %d waiting claims, want 2", w)
	}
	cancel()
	wg.Wait()
}
