package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/test/kubetest"
)

// BenchmarkE2E_KubeClaimToFinished measures a one-step `true` workflow
// through server, runner (--executor kube, a runner ServiceAccount) and a
// job pod, from the runner's "claimed run" log line to its "run finished"
// line (the job pod deleted and gone, the result handed to the server),
// against kubetest.Baseline's bare run of the same hardened pod (create →
// Running, one exec of `true`, delete → gone), interleaved one by one in
// the same namespace, and against that bare run deleting the pod with
// grace period 0 as Knotless does once its agent has ended everything. It
// reports the medians in ms and the ratios (the target is ≤ 1.15).
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench KubeClaimToFinished -benchtime 10x ./test/e2e
func BenchmarkE2E_KubeClaimToFinished(b *testing.B) {
	k := newKubeRunner(b)
	w := newWorld(b, 30*time.Second)
	// The job pod of BenchPod: cpu 1, memory 128Mi, disk 256Mi.
	runner := w.startRunner(w.registerRunner("bench"), append(k.args, "--cpus", "1")...)
	base, err := kubetest.NewBaseline(k.c.Config, k.ns)
	if err != nil {
		b.Fatal(err)
	}
	base.Pod = func(ns string) *corev1.Pod { return kube.BenchPod(ns, kubetest.MainContainer) }
	// The same run deleting with grace 0, what Knotless does once its
	// agent has ended everything.
	force := *base
	force.DeleteGracePeriod = ptr.To[int64](0)
	wf := map[string]string{".knotless/workflows/ci.yml": "on:\n  push: {}\nimage: " + kubetest.JobBaseImage + "\nsteps:\n  - run: \"true\"\n"}
	// One warm-up of each: the runner's mirror, the API server's caches.
	w.waitFinal(w.pushOne(wf).ID, 3*time.Minute)
	if _, err := base.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	var runs, bare, bareForce []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run := w.pushOne(wf)
		final := w.waitFinal(run.ID, 3*time.Minute)
		if final.State != api.StateSucceeded {
			b.Fatalf("%s; runner log:\n%s", describe(final), runner.output())
		}
		d, err := claimToFinished(runner.output(), run.ID)
		if err != nil {
			b.Fatal(err)
		}
		runs = append(runs, d)
		r, err := base.Run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		bare = append(bare, r.Total)
		f, err := force.Run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		bareForce = append(bareForce, f.Total)
	}
	b.StopTimer()
	mr, mb, mf := median(runs), median(bare), median(bareForce)
	b.ReportMetric(float64(mr.Milliseconds()), "knotless-ms")
	b.ReportMetric(float64(mb.Milliseconds()), "bare-ms")
	b.ReportMetric(float64(mf.Milliseconds()), "bare-force-ms")
	b.ReportMetric(float64(mr)/float64(mb), "ratio")
	b.ReportMetric(float64(mr)/float64(mf), "ratio-force")
	b.Logf("claim → finished: %v (median %v); bare run: %v (median %v); bare run deleting with grace 0: %v (median %v)", runs, mr, bare, mb, bareForce, mf)
}

var logTime = regexp.MustCompile(`^time=(\S+) `)

// claimToFinished reads the runner's log for run id's "claimed run" and
// "run finished" lines and returns the time between them.
func claimToFinished(log string, id int64) (time.Duration, error) {
	return logInterval(log, id, "claimed run", "run finished")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkE2E_KubeClaimToFinishedWarm is BenchmarkE2E_KubeClaimToFinished
// with the runner keeping one warm pod (--warm-pods 1): each run takes a
// pod started before its claim. It reports claim → finished and claim →
// first step started (the runner's "step started" line) against the bare
// run of the same hardened pod and against the bare pod's create →
// Running alone (the targets: claim → finished below 1.0 of the bare run,
// claim → first step below the bare create → Running), interleaved, in
// ms.
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench KubeClaimToFinishedWarm -benchtime 10x ./test/e2e
func BenchmarkE2E_KubeClaimToFinishedWarm(b *testing.B) {
	k := newKubeRunner(b)
	w := newWorld(b, 30*time.Second)
	// cpu 500m, so that the warm pod waiting and the bare pod fit the
	// test node beside each other.
	runner := w.startRunner(w.registerRunner("benchwarm"), append(k.args, "--cpus", "500m", "--warm-pods", "1")...)
	base, err := kubetest.NewBaseline(k.c.Config, k.ns)
	if err != nil {
		b.Fatal(err)
	}
	base.Pod = func(ns string) *corev1.Pod {
		p := kube.BenchPod(ns, kubetest.MainContainer)
		for _, r := range []corev1.ResourceList{p.Spec.Containers[0].Resources.Requests, p.Spec.Containers[0].Resources.Limits} {
			r[corev1.ResourceCPU] = resource.MustParse("500m")
		}
		return p
	}
	wf := map[string]string{".knotless/workflows/ci.yml": "on:\n  push: {}\nsteps:\n  - run: \"true\"\n"}
	ready := func(n int) {
		b.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for strings.Count(runner.output(), `msg="warm pod ready"`) < n {
			if time.Now().After(deadline) {
				b.Fatalf("no warm pod ready %d times; runner log:\n%s", n, runner.output())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ready(1)
	w.waitFinal(w.pushOne(wf).ID, 3*time.Minute) // warm-up: the runner's mirror
	if _, err := base.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	var runs, firstStep, bare, bareRunning []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ready(i + 2)
		run := w.pushOne(wf)
		final := w.waitFinal(run.ID, 3*time.Minute)
		if final.State != api.StateSucceeded {
			b.Fatalf("%s; runner log:\n%s", describe(final), runner.output())
		}
		log := runner.output()
		if !strings.Contains(w.stepLog(run.ID, api.SetupStep), "took the warm pod") {
			b.Fatalf("run %d did not take the warm pod:\n%s", run.ID, w.stepLog(run.ID, api.SetupStep))
		}
		d, err := logInterval(log, run.ID, "claimed run", "run finished")
		if err != nil {
			b.Fatal(err)
		}
		s, err := logInterval(log, run.ID, "claimed run", "step started")
		if err != nil {
			b.Fatal(err)
		}
		runs, firstStep = append(runs, d), append(firstStep, s)
		r, err := base.Run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		bare, bareRunning = append(bare, r.Total), append(bareRunning, r.Start)
	}
	b.StopTimer()
	mr, ms, mb, mbr := median(runs), median(firstStep), median(bare), median(bareRunning)
	b.ReportMetric(float64(mr.Milliseconds()), "knotless-ms")
	b.ReportMetric(float64(ms.Milliseconds()), "first-step-ms")
	b.ReportMetric(float64(mb.Milliseconds()), "bare-ms")
	b.ReportMetric(float64(mbr.Milliseconds()), "bare-running-ms")
	b.ReportMetric(float64(mr)/float64(mb), "ratio")
	b.ReportMetric(float64(ms)/float64(mbr), "first-step-ratio")
	b.Logf("warm: claim → finished %v (median %v), claim → first step %v (median %v); bare run %v (median %v), bare create → Running median %v",
		runs, mr, firstStep, ms, bare, mb, mbr)
}

// logInterval reads the runner's log for run id's first line with msg
// from and the first later line with msg to, and returns the time between.
func logInterval(log string, id int64, from, to string) (time.Duration, error) {
	var t0, t1 time.Time
	tag := fmt.Sprintf(" run=%d ", id)
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line+" ", tag) {
			continue
		}
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		switch {
		case t0.IsZero() && strings.Contains(line, `msg="`+from+`"`):
			t0 = t
		case !t0.IsZero() && t1.IsZero() && strings.Contains(line, `msg="`+to+`"`):
			t1 = t
		}
	}
	if t0.IsZero() || t1.IsZero() {
		return 0, fmt.Errorf("the runner's log has no %q then %q lines for run %d", from, to, id)
	}
	return t1.Sub(t0), nil
}

// BenchmarkE2E_KubeExecWholeProcess measures `knotless-run exec --executor
// kube` of a one-step `true` workflow as a whole process, from its start to
// its exit (kubeconfig, clients, the job pod, the checkout copied in, the
// agent, the step, the pod deleted and gone), against bare-run
// (test/kubetest/cmd/bare-run) as a whole process: the same hardened pod
// (kube.BenchPod, cpu 1, memory 128Mi) created, Running and Ready, one exec
// of `true`, deleted with grace 0 and gone, with one clientset. The two
// programs run one after the other, interleaved, after one warm-up each; it
// reports the medians in ms and their ratio (the target is ≤ 1.3).
// The checkout is a repository of the workflow file alone.
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench KubeExecWholeProcess -benchtime 7x ./test/e2e
func BenchmarkE2E_KubeExecWholeProcess(b *testing.B) {
	k := newKubeRunner(b)
	home, src, dir := b.TempDir(), b.TempDir(), b.TempDir()
	bare := filepath.Join(dir, "bare-run")
	build := exec.Command(goTool, "build", "-o", bare, "./test/kubetest/cmd/bare-run")
	build.Dir = moduleRoot
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build bare-run: %v\n%s", err, out)
	}
	const file = ".knotless/workflows/ci.yml"
	if err := os.MkdirAll(filepath.Join(src, ".knotless/workflows"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, file), []byte("on: {push: {}}\nsteps:\n  - run: \"true\"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."},
		{"-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "one step"}} {
		git := exec.Command("git", args...)
		git.Dir, git.Env = src, baseEnv(home)
		if out, err := git.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	process := func(dir, name string, args ...string) (time.Duration, string) {
		b.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, baseEnv(home)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil {
			b.Fatalf("%s: %v\n%s", filepath.Base(name), err, out)
		}
		return d, string(out)
	}
	knotless := func() (time.Duration, string) {
		return process(src, runnerBin(), append(append([]string{"exec", file}, k.args...), "--cpus", "1", "--memory", "128Mi")...)
	}
	bareRun := func() (time.Duration, string) {
		return process(dir, bare, "--kubeconfig", k.kubeconfig, "--namespace", k.ns, "--cpus", "1", "--memory", "128Mi")
	}
	knotless() // warm-up: the node's image, the API server's caches
	bareRun()
	var runs, bares []time.Duration
	var lastRun, lastBare string
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, out := knotless()
		runs, lastRun = append(runs, d), out
		d, out = bareRun()
		bares, lastBare = append(bares, d), out
	}
	b.StopTimer()
	mr, mb := median(runs), median(bares)
	b.ReportMetric(float64(mr.Milliseconds()), "knotless-exec-ms")
	b.ReportMetric(float64(mb.Milliseconds()), "bare-ms")
	b.ReportMetric(float64(mr)/float64(mb), "ratio")
	b.Logf("knotless-run exec: %v (median %v); bare-run: %v (median %v)\nlast knotless-run exec:\n%s\nlast bare-run: %s", runs, mr, bares, mb, lastRun, lastBare)
}
