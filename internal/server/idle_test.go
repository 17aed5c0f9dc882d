package server_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testwait"
)

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestClaim_IdleLongPollsOf200RunnersUseAlmostNoCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("registers 200 runners")
	}
	f := newFixture(t, servertest.Options{})
	const n = 200
	runners := make([]*servertest.Runner, n)
	for i := range runners {
		runners[i] = f.RegisterRunner(t, f.repo, fmt.Sprintf("r%03d", i), nil, true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out api.ClaimOutput
			r.Client.Procedure(ctx, api.MethodClaim, api.ClaimInput{Wait: 60}, &out)
		}()
	}
	// Every runner was heard from: all polls passed authentication.
	testwait.For(t, 60*time.Second, "all runners to start polling", func() bool {
		var list api.ListRunnersOutput
		if err := f.alice().Query(context.Background(), api.MethodListRunners, url.Values{"repo": {f.repo}, "limit": {"1000"}}, &list); err != nil {
			return false
		}
		for _, r := range list.Runners {
			if r.LastSeenAt == nil {
				return false
			}
		}
		return len(list.Runners) == n
	})
	// The last polls finish looking and wait; what follows is measured.
	testwait.For(t, 30*time.Second, "every runner's poll to wait", func() bool { return f.ClaimStats().Waiting == n })
	const window = 3 * time.Second
	before := cpuTime(t)
	time.Sleep(window)
	used := cpuTime(t) - before
	t.Logf("%d idle long polls: %s CPU in %s", n, used, window)
	if used > window/10 {
		t.Errorf("%d idle long polls used %s CPU in %s; want near zero (no polling)", n, used, window)
	}
	cancel()
	wg.Wait()
}
