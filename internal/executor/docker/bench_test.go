package docker_test

import (
	"context"
	"sort"
	"strconv"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/docker"
)

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// bareRun is dockertest's BareRun, labelled as the fixture's, on network
// ("": none).
func bareRun(b *testing.B, f *fixture, network string) (run, exec time.Duration) {
	run, exec, err := f.eng.BareRun(context.Background(), map[string]string{agentenv.LabelRunner: f.runner}, network)
	if err != nil {
		b.Fatal(err)
	}
	return run, exec
}

// knotlessRun prepares a session, runs n steps of `true` and cleans up.
func knotlessRun(b *testing.B, f *fixture, e *docker.Executor, n int) time.Duration {
	ctx := context.Background()
	t0 := time.Now()
	s, err := e.Prepare(ctx, executor.Spec{ID: runID("bench"), Workspace: b.TempDir(), Timeout: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		res, err := s.Exec(ctx, executor.Step{ID: strconv.Itoa(i), Script: "true\n"}, nil)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("step %d: %+v, %v", i, res, err)
		}
	}
	if err := s.Cleanup(ctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// BenchmarkDocker_RunAndStepOverhead measures, interleaved in one run on
// one engine: a one-step run (Prepare, one step of `true`, Cleanup)
// against the bare SDK run (create, start, one exec, remove); a run of 50
// steps, giving the cost of one more step ((run of 50 − run of 1) / 49)
// against one bare exec of `true`. Medians of b.N samples each, in ms.
func BenchmarkDocker_RunAndStepOverhead(b *testing.B) {
	f := newFixture(b)
	e := f.executor(b, f.config())
	knotlessRun(b, f, e, 1) // the network and the image, once
	bareRun(b, f, "")
	var run1, run50, bare, bareNet, bareExec []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, x := bareRun(b, f, "")
		bare, bareExec = append(bare, r), append(bareExec, x)
		r, _ = bareRun(b, f, docker.NetworkName(f.runner))
		bareNet = append(bareNet, r)
		run1 = append(run1, knotlessRun(b, f, e, 1))
		run50 = append(run50, knotlessRun(b, f, e, 50))
	}
	b.StopTimer()
	m1, m50, mb := median(run1), median(run50), median(bare)
	b.ReportMetric(ms(m1), "run1-ms")
	b.ReportMetric(ms(mb), "bare-run-ms")
	b.ReportMetric(float64(m1)/float64(mb), "run1/bare")
	b.ReportMetric(ms(median(bareNet)), "bare-net-run-ms")
	b.ReportMetric(float64(m1)/float64(median(bareNet)), "run1/bare-net")
	b.ReportMetric(ms(m50), "run50-ms")
	b.ReportMetric(ms((m50-m1)/49), "step-ms")
	b.ReportMetric(ms(median(bareExec)), "bare-exec-ms")
}
