package runner

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/testwait"
)

// A failed run is counted by state and reason, its step's duration and
// log bytes are recorded, and the shell executor's environment shows as
// made and removed through the executor-neutral Observer; the names pass
// promlint.
func TestMetrics_RunnerCountsRunsStepsLogsAndEnvironments(t *testing.T) {
	w := newWorld(t, true)
	m := NewMetrics()
	w.startRunner(func(c *Config) {
		c.Metrics = m
		c.Executor = shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true, Logger: c.Logger, Observer: m},
			Dir: filepath.Join(w.work, "shell")})
	})
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
steps:
  - name: bad
    run: |
      echo failing
      exit 7
`})
	if final := w.waitFinal(run.ID, 60*time.Second); final.State != api.StateFailed {
		t.Fatalf("run %+v", final)
	}
	testwait.For(t, 10*time.Second, "the environment's removal to be counted", func() bool {
		return testutil.ToFloat64(m.envRemoved.WithLabelValues("shell")) == 1
	})
	for what, got := range map[string]float64{
		"runs failed/exit-code":  testutil.ToFloat64(m.runs.WithLabelValues(api.StateFailed, api.ReasonExitCode)),
		"environments made":      testutil.ToFloat64(m.envMade.WithLabelValues("shell")),
		"claims that got a run":  testutil.ToFloat64(m.claims.WithLabelValues("run")),
		"step durations (count)": float64(testutil.CollectAndCount(m.stepDuration)),
	} {
		if got != 1 {
			t.Errorf("%s = %v, want 1", what, got)
		}
	}
	if n := testutil.ToFloat64(m.logBytes); n < float64(len("failing\n")) {
		t.Errorf("log bytes = %v, want at least the step's %d", n, len("failing\n"))
	}
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "knotless_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}
