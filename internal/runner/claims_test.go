package runner

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// claimCounter counts the claim requests (api.MethodClaim) a runner sends.
type claimCounter struct {
	next   http.RoundTripper
	claims atomic.Int64
}

func (c *claimCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/"+api.MethodClaim) {
		c.claims.Add(1)
	}
	return c.next.RoundTrip(req)
}

// A runner with N free slots takes a burst of N queued runs in one claim
// and starts every run of the answer. Before, each claim's answer was one
// run: a runner of --capacity 100 took a kube burst of 100 queued runs in
// 100 claims in a row, its 100 "claimed run" lines spread over 6 s (24 ms
// apart at the median, up to 565 ms).
func TestIntegration_RunnerWithNFreeSlotsClaimsNQueuedRunsInOneClaim(t *testing.T) {
	const n = 5
	w := newWorld(t, true)
	m := NewMetrics()
	counter := &claimCounter{next: http.DefaultTransport}
	w.startRunner(func(c *Config) {
		c.Capacity = n
		c.Metrics = m
		c.HTTP = &http.Client{Transport: counter}
	})
	testwait.For(t, 30*time.Second, "the runner's claim to wait", func() bool { return w.srv.ClaimStats().Waiting == 1 })
	before := counter.claims.Load()

	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf(".knotless/workflows/w%d.yml", i)] = wfHead + "steps:\n  - run: echo hello\n"
	}
	w.srv.Push(t, w.repo, w.token, files, "main")
	var runs []api.Run
	testwait.For(t, 10*time.Second, "the push's runs", func() bool {
		runs = nil
		for id := range w.runIDs() {
			runs = append(runs, api.Run{ID: id})
		}
		return len(runs) == n
	})
	for _, run := range runs {
		if final := w.waitFinal(run.ID, 60*time.Second); final.State != api.StateSucceeded {
			t.Errorf("run %d = %s/%s %q, want succeeded", run.ID, final.State, final.Reason, final.Message)
		}
	}
	if got := testutil.ToFloat64(m.claims.WithLabelValues("run")); got != 1 {
		t.Errorf("claims that got runs = %v, want 1 for %d queued runs and %d free slots", got, n, n)
	}
	// The waiting claim took the burst; the next ones find nothing
	// (each run's slot comes back as it ends).
	if got := counter.claims.Load() - before; got > 1+n {
		t.Errorf("%d claim requests since the burst, want its one and at most one per run ended", got)
	}
}
