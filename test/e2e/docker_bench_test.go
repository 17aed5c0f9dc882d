package e2e

import (
	"context"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/test/dockertest"
)

// BenchmarkE2E_DockerClaimToFinished measures a one-step `true` workflow
// through server, runner (--executor docker) and a job container, from the
// runner's "claimed run" log line to its "run finished" line (checkout,
// container, agent, step, logs, container removed, result handed over),
// against dockertest's bare SDK run of the same hardened container
// (create, start, one exec of `true`, remove), interleaved one by one on
// the same engine. It reports the medians in ms and their ratio.
//
//	go test -count=1 -run '^$' -bench DockerClaimToFinished -benchtime 10x ./test/e2e
func BenchmarkE2E_DockerClaimToFinished(b *testing.B) {
	d := newDockerRunner(b)
	w := newWorld(b, 30*time.Second)
	d.cleanup(b, "dbench")
	runner := w.startRunner(w.registerRunner("dbench"), d.args...)
	wf := map[string]string{".knotless/workflows/ci.yml": "on:\n  push: {}\nimage: " + dockertest.JobImage + "\nsteps:\n  - run: \"true\"\n"}
	w.waitFinal(w.pushOne(wf).ID, 3*time.Minute) // the mirror, the runner's network
	labels := map[string]string{agentenv.LabelRunner: "dbench"}
	if _, _, err := d.eng.BareRun(context.Background(), labels, ""); err != nil {
		b.Fatal(err)
	}
	var runs, bare, bareNet []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run := w.pushOne(wf)
		final := w.waitFinal(run.ID, 3*time.Minute)
		if final.State != api.StateSucceeded {
			b.Fatalf("%s; runner log:\n%s", describe(final), runner.output())
		}
		dur, err := claimToFinished(runner.output(), run.ID)
		if err != nil {
			b.Fatal(err)
		}
		runs = append(runs, dur)
		r, _, err := d.eng.BareRun(context.Background(), labels, "")
		if err != nil {
			b.Fatal(err)
		}
		bare = append(bare, r)
		// The same container on the runner's network, as job containers are.
		r, _, err = d.eng.BareRun(context.Background(), labels, docker.NetworkName("dbench"))
		if err != nil {
			b.Fatal(err)
		}
		bareNet = append(bareNet, r)
	}
	b.StopTimer()
	mr, mb, mn := median(runs), median(bare), median(bareNet)
	b.ReportMetric(float64(mr.Milliseconds()), "knotless-ms")
	b.ReportMetric(float64(mb.Milliseconds()), "bare-ms")
	b.ReportMetric(float64(mr)/float64(mb), "ratio")
	b.ReportMetric(float64(mn.Milliseconds()), "bare-net-ms")
	b.ReportMetric(float64(mr)/float64(mn), "ratio-net")
	b.Logf("claim → finished: %v (median %v); bare run: %v (median %v); on the runner's network: %v (median %v)", runs, mr, bare, mb, bareNet, mn)
}
