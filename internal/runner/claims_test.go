package runner

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// A runner with N free slots takes a burst of N queued runs in one claim
// and starts every run of the answer. Before, each claim's answer was one
// run: a runner of --capacity 100 took a kube burst of 100 queued runs in
// 100 claims in a row, its 100 "claimed run" lines spread over 6 s (24 ms
// apart at the median, up to 565 ms).
func TestIntegration_RunnerWithNFreeSlotsClaimsNQueuedRunsInOneClaim(t *testing.T) {
	const n = 5
	w := newWorld(t, true)
	m := NewMetrics()
	w.startRunner(func(c *Config) {
		c.Capacity = n
		c.Metrics = m
	})
	testwait.For(t, 30*time.Second, "the runner's claim to wait", func() bool { return w.srv.ClaimStats().Waiting == 1 })

	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf(".knotless/workflows/w%d.yml", i)] = wfHead + "steps:\n  - run: echo hello\n"
	}
	w.srv.Push(t, w.repo, w.token, files, "main")
	var ids map[int64]bool
	testwait.For(t, 10*time.Second, "the push's runs", func() bool {
		ids = w.runIDs()
		return len(ids) == n
	})
	for id := range ids {
		if final := w.waitFinal(id, 60*time.Second); final.State != api.StateSucceeded {
			t.Errorf("run %d = %s/%s %q, want succeeded", id, final.State, final.Reason, final.Message)
		}
	}
	if got := testutil.ToFloat64(m.claims.WithLabelValues("run")); got != 1 {
		t.Errorf("claims that got runs = %v, want 1 for %d queued runs and %d free slots", got, n, n)
	}
}
