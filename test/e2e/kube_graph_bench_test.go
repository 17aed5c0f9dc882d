package e2e

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/test/kubetest"
)

// BenchmarkE2E_KubePipelineGraphOverhead measures what needs: and a
// matrix cost on kube, in one invocation: a pipeline of a 4-way matrix
// plus one run needing all four, from the push (the runs' creation) to
// the last run's end, against the sum of the same five runs triggered by
// hand one after another (each from its trigger to its end), interleaved
// per iteration on one runner (--capacity 4, so the matrix runs side by
// side). It also reports the pipeline's critical path (the slowest matrix
// run plus the needing run, each from its start to its end) and the
// pipeline's time past it: the scheduling overhead of the graph (claims,
// the wait of the needing run for the last of its needs). Times are the
// server's (created, started, finished), in ms; medians over b.N.
//
// Each run is one step, `sleep $KNOTLESS_BENCH_GRAPH_SLEEP` (seconds,
// default 0: the runs are their overhead alone, as tiny as a CI run can
// afford):
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench KubePipelineGraph -benchtime 1x ./test/e2e
func BenchmarkE2E_KubePipelineGraphOverhead(b *testing.B) {
	secs := os.Getenv("KNOTLESS_BENCH_GRAPH_SLEEP")
	if secs == "" {
		secs = "0"
	}
	if _, err := strconv.ParseFloat(secs, 64); err != nil {
		b.Fatalf("KNOTLESS_BENCH_GRAPH_SLEEP=%q: want seconds", secs)
	}
	k := newKubeRunner(b)
	w := newWorld(b, 30*time.Second)
	runner := w.startRunner(w.registerRunner("bench"), append(k.args, "--capacity", "4")...)
	step := "steps:\n  - run: sleep " + secs + "\n"
	files := map[string]string{
		".knotless/workflows/test.yml":   "on: {push: {}}\nimage: " + kubetest.JobBaseImage + "\nmatrix:\n  shard: [\"1\", \"2\", \"3\", \"4\"]\n" + step,
		".knotless/workflows/report.yml": "on: {push: {}}\nimage: " + kubetest.JobBaseImage + "\nneeds: [test]\n" + step,
		".knotless/workflows/one.yml":    "on: {manual: {}}\nimage: " + kubetest.JobBaseImage + "\n" + step,
	}
	// One warm-up of each: the runner's mirror, the API server's caches.
	w.push(files, 5)
	pipeline := func() (total, critical time.Duration) {
		runs := w.push(nil, 5)
		var last time.Time
		var slowest time.Duration
		var report api.Run
		for _, r := range runs {
			f := w.waitFinal(r.ID, 5*time.Minute)
			if f.State != api.StateSucceeded {
				b.Fatalf("%s; runner log:\n%s", describe(f), runner.output())
			}
			last = latest(last, *f.FinishedAt)
			if f.Workflow == "report" {
				report = f
			} else {
				slowest = max(slowest, f.FinishedAt.Sub(*f.StartedAt))
			}
		}
		return last.Sub(runs[0].CreatedAt), slowest + report.FinishedAt.Sub(*report.StartedAt)
	}
	byHand := func() time.Duration {
		var sum time.Duration
		for range 5 {
			var p api.Pipeline
			out := w.cliOK("", "run", "trigger", "--repo", w.repo, "--workflow", "one", "--json")
			if err := json.Unmarshal([]byte(out), &p); err != nil || len(p.Runs) != 1 {
				b.Fatalf("run trigger: %v\n%s", err, out)
			}
			f := w.waitFinal(p.Runs[0].ID, 5*time.Minute)
			if f.State != api.StateSucceeded {
				b.Fatalf("%s; runner log:\n%s", describe(f), runner.output())
			}
			sum += f.FinishedAt.Sub(f.CreatedAt)
		}
		return sum
	}
	byHand()
	var totals, criticals, sums []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		total, critical := pipeline()
		totals, criticals = append(totals, total), append(criticals, critical)
		sums = append(sums, byHand())
	}
	b.StopTimer()
	mt, mc, ms := median(totals), median(criticals), median(sums)
	b.ReportMetric(float64(mt.Milliseconds()), "pipeline-ms")
	b.ReportMetric(float64(ms.Milliseconds()), "by-hand-sum-ms")
	b.ReportMetric(float64(mt)/float64(ms), "ratio")
	b.ReportMetric(float64(mc.Milliseconds()), "critical-path-ms")
	b.ReportMetric(float64((mt - mc).Milliseconds()), "overhead-ms")
	b.Logf("push → last run finished: %v (median %v); the same 5 runs by hand, summed: %v (median %v); critical path %v (median %v)",
		totals, mt, sums, ms, criticals, mc)
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
