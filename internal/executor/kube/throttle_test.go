package kube_test

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/metrics"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/test/kubetest"
)

// optionsExecutor makes the kube executor as `knotless-run run
// --executor kube` does, from its flags (the fixture's kubeconfig and
// namespace, then args), with the fixture's job defaults.
func (f *fixture) optionsExecutor(t *testing.T, args ...string) executor.Executor {
	t.Helper()
	o := &kube.Options{}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	o.AddFlags(fs)
	all := []string{"--kubeconfig", f.kubeconfig, "--namespace", f.ns, "--disk", "256Mi"}
	if f.runtimeClass != "" {
		all = append(all, "--runtime-class", f.runtimeClass, "--user-namespace", kube.UserNamespaceOff)
	}
	if err := fs.Parse(append(all, args...)); err != nil {
		t.Fatal(err)
	}
	ex, err := o.New(executor.Setup{Work: t.TempDir(), Runner: "test", Agent: f.agent, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Job: executor.Job{Image: kubetest.JobBaseImage, CPUs: "200m", Memory: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.(io.Closer).Close() })
	return ex
}

// prepareAtOnce prepares n runs at the same moment and returns each
// one's setup log.
func (f *fixture) prepareAtOnce(t *testing.T, ex executor.Executor, n int) []string {
	t.Helper()
	logs := make([]*syncbuf.Buffer, n)
	var wg sync.WaitGroup
	for i := range n {
		logs[i] = &syncbuf.Buffer{}
		spec := f.spec(t, runID("throttle"))
		spec.Log = io.MultiWriter(logs[i], spec.Log)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			s, err := ex.Prepare(ctx, spec)
			if err != nil {
				t.Errorf("prepare %s: %v", spec.ID, err)
				return
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = s.Cleanup(ctx)
			})
		}()
	}
	wg.Wait()
	out := make([]string, n)
	for i, l := range logs {
		out[i] = l.String()
	}
	return out
}

// throttleWaited is the histogram's sum and count.
func throttleWaited(t *testing.T) (seconds float64, requests uint64) {
	t.Helper()
	var m dto.Metric
	if err := metrics.KubeClient.ThrottleWait.WithLabelValues().(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()
}

var waitedLine = regexp.MustCompile(`kube executor: waited ([0-9.]+m?s) for client-side throttling: \d+ of this run's API requests waited .*--kube-api-qps 1, --kube-api-burst 1`)

// TestKube_ARunHeldByTheClientsRateLimitSaysSoInItsSetupLogAndIsCounted:
// a runner given --kube-api-qps 1 --kube-api-burst 1 prepares three runs at
// once: with the informer's list and watch that makes five rate-limited
// requests in one bucket of one token a second, so one run's pod create
// waits at least 2 s (one alone could find the token free). That run's
// setup log says how long it waited for client-side throttling, naming
// the flags; knotless_runner_kube_client_throttle_seconds grew by at
// least what the logs say, and kube_throttled_runs_total{cause="client"}
// by as many runs; a runner's registry exports all three. The failure it
// pins: a run slowed by the runner's own limit read like a slow cluster.
func TestKube_ARunHeldByTheClientsRateLimitSaysSoInItsSetupLogAndIsCounted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ex := f.optionsExecutor(t, "--kube-api-qps", "1", "--kube-api-burst", "1")
	sum0, _ := throttleWaited(t)
	runs0 := testutil.ToFloat64(metrics.KubeClient.ThrottledRuns.WithLabelValues("client"))
	creates0 := testutil.ToFloat64(metrics.KubeClient.Requests.WithLabelValues("create", "pods", "201"))
	logs := f.prepareAtOnce(t, ex, 3)
	said, total := 0, 0.0
	for _, l := range logs {
		m := waitedLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		d, err := time.ParseDuration(m[1])
		// Said only past 1 s, and rounded to 10 ms: "1s" is 1.000-1.005 s.
		if err != nil || d < time.Second {
			t.Errorf("setup log says the run waited %q, want at least 1 s: %s", m[1], m[0])
		}
		said++
		total += d.Seconds()
	}
	if said == 0 {
		t.Fatalf("no run's setup log says it waited for client-side throttling; logs:\n%s", strings.Join(logs, "\n---\n"))
	}
	sum1, _ := throttleWaited(t)
	if sum1-sum0 < total-0.05 {
		t.Errorf("throttle wait metric grew by %.2f s, the setup logs say %.2f s", sum1-sum0, total)
	}
	if n := testutil.ToFloat64(metrics.KubeClient.ThrottledRuns.WithLabelValues("client")) - runs0; n < float64(said) {
		t.Errorf("throttled runs (client) grew by %v, %d setup logs say so", n, said)
	}
	if n := testutil.ToFloat64(metrics.KubeClient.Requests.WithLabelValues("create", "pods", "201")) - creates0; n < 3 {
		t.Errorf("pod creates counted: %v, want at least the 3 runs'", n)
	}
	exportedByARunnersRegistry(t)
}

// exportedByARunnersRegistry checks that a registry as knotless-run's
// --metrics-listen serves (metrics.NewRegistry) exports the kube client's
// three metrics, and that they pass promlint.
func exportedByARunnersRegistry(t *testing.T) {
	t.Helper()
	reg := metrics.NewRegistry()
	for _, name := range []string{"knotless_runner_kube_api_requests_total", "knotless_runner_kube_client_throttle_seconds", "knotless_runner_kube_throttled_runs_total"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
			t.Errorf("a runner's registry exports %d series of %s (%v)", n, name, err)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "knotless_runner_kube") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

// TestKube_RunsUnderTheDefaultRateLimitSayNothingOfThrottling: with the
// default --kube-api-qps and --kube-api-burst (50/100), three runs
// prepared at once go through the rate limiter (its histogram counts
// their requests: the positive control) and no setup log speaks of
// client-side throttling. The failure it pins: a line in every run's log
// that would teach people to ignore it.
func TestKube_RunsUnderTheDefaultRateLimitSayNothingOfThrottling(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ex := f.optionsExecutor(t)
	_, n0 := throttleWaited(t)
	logs := f.prepareAtOnce(t, ex, 3)
	if _, n1 := throttleWaited(t); n1-n0 < 3 {
		t.Errorf("the rate limiter saw %d requests, want at least the 3 pods' creates", n1-n0)
	}
	for _, l := range logs {
		if strings.Contains(l, "client-side throttling") || strings.Contains(l, "429") {
			t.Errorf("a run under the default rate limit speaks of throttling:\n%s", l)
		}
		if !strings.Contains(l, "pod running on node") {
			t.Errorf("setup log without its pod (the run proves nothing):\n%s", l)
		}
	}
}

// rejectingLevel is kubetest's RejectingPriorityLevel for the fixture's
// namespace: the runner identity's requests on pods go to a one-share
// level that rejects.
func (f *fixture) rejectingLevel(t *testing.T) types.UID {
	t.Helper()
	return f.c.RejectingPriorityLevel(t, f.ns)
}

// loadAsRunner lists the namespace's pods as the runner's identity from
// n clients in a loop, without retries, until the test ends, keeping its
// priority level full.
func (f *fixture) loadAsRunner(t *testing.T, n int) {
	t.Helper()
	cfg := rest.CopyConfig(f.rest)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if client.CoreV1().RESTClient().Get().Namespace(f.ns).Resource("pods").MaxRetries(0).Do(ctx).Error() != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
}

// TestKube_ARunRefusedByAPIPriorityAndFairnessSaysSoInItsSetupLog: a
// FlowSchema gives the runner's identity a priority level of one share
// that rejects what does not fit, clients of the same identity keep it
// full, and runs are prepared one after another until one of their own
// requests was answered 429 (at most two minutes: without a refusal the
// test proves nothing and fails). That run is prepared all the same
// (client-go and the runner send it again), its setup log says the API
// server made it wait, by API Priority and Fairness, naming the level's
// UID, and kube_throttled_runs_total{cause="apf"} counts it. The failure
// it pins: a run slowed by the cluster's fairness read like a slow
// runner.
func TestKube_ARunRefusedByAPIPriorityAndFairnessSaysSoInItsSetupLog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	uid := f.rejectingLevel(t)
	ex := f.optionsExecutor(t)
	apf0 := testutil.ToFloat64(metrics.KubeClient.ThrottledRuns.WithLabelValues("apf"))
	f.loadAsRunner(t, 8)
	deadline := time.Now().Add(2 * time.Minute)
	for i := 1; ; i++ {
		l := f.prepareAtOnce(t, ex, 1)[0]
		if strings.Contains(l, "the API server made this run wait") {
			want := "by API Priority and Fairness (priority level UID " + string(uid) + ")"
			if !strings.Contains(l, want) {
				t.Errorf("setup log of a refused run does not say %q:\n%s", want, l)
			}
			t.Logf("run %d of its own was refused", i)
			break
		}
		if t.Failed() || time.Now().After(deadline) {
			t.Fatalf("none of %d runs' requests was refused in two minutes: the test proves nothing", i)
		}
	}
	if n := testutil.ToFloat64(metrics.KubeClient.ThrottledRuns.WithLabelValues("apf")) - apf0; n < 1 {
		t.Errorf("throttled runs (apf) grew by %v, want at least the refused run", n)
	}
}
