package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/test/kubetest"
)

// rejectedBy reads, from the API server's metrics, how many requests API
// Priority and Fairness rejected for flow schema name.
func (k *kubeRunner) rejectedBy(t testing.TB, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := k.c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^apiserver_flowcontrol_rejected_requests_total\{[^}]*flow_schema="` + regexp.QuoteMeta(name) + `"[^}]*\} ([0-9.e+]+)$`)
	n := 0
	for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
		f, _ := strconv.ParseFloat(m[1], 64)
		n += int(f)
	}
	return n
}

// TestE2E_KubeRunnerThrottledByAPIPriorityAndFairnessEndsEveryRunWithItsTrueResult:
// a FlowSchema gives the runner's identity (its non-exec requests on
// pods: create, get, list, watch, delete, patch) a priority level of one
// share that rejects what does not fit (429), and a runner with
// --capacity 8 runs eight runs at once: every run ends with its true
// result (seven succeed, one fails with its exit code), none for the
// throttling. Clients of the same identity keep the level full until the
// audit log shows a 429 for one of the runner's own requests (else the
// test proves nothing); eight runs alone did not always fill it.
func TestE2E_KubeRunnerThrottledByAPIPriorityAndFairnessEndsEveryRunWithItsTrueResult(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	k.c.RejectingPriorityLevel(t, k.ns)
	name := "knotless-throttle-" + k.ns // the level RejectingPriorityLevel made

	w := newWorld(t, 30*time.Second)
	args := append(append([]string{}, k.args...), "--capacity", "8", "--cpus", "50m", "--memory", "64Mi")
	runner := w.startRunner(w.registerRunner("apf"), args...)
	files := map[string]string{}
	for i := 1; i <= 8; i++ {
		exit := 0
		if i == 8 {
			exit = 3
		}
		files[fmt.Sprintf(".knotless/workflows/w%d.yml", i)] = fmt.Sprintf("on: {push: {}}\nsteps:\n  - run: echo one %d; sleep 1\n  - run: echo two; exit %d\n", i, exit)
	}
	// Eight runs alone may not fill the level's few seats at once (the CI
	// once saw no rejection at all), so clients of the same identity keep
	// it full until the runner's own requests (its user agent, not the
	// load's) have been rejected with 429, as the audit log records: the
	// positive control, without which the test proves nothing.
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := k.loadAs(t, loadCtx, 5)
	before := k.rejectedBy(t, name)
	runs := w.push(files, 8)
	actx, acancel := context.WithTimeout(ctx, 3*time.Minute)
	ev, err := kubetest.AuditQuery{Namespace: k.ns, User: "system:serviceaccount:" + k.ns + ":runner",
		UserAgentPrefix: "knotless-run/", Code: 429}.Search(actx, k.c.AuditLogPath)
	acancel()
	stopLoad()
	<-loadDone
	if err != nil {
		t.Errorf("the FlowSchema never throttled the runner's own requests, so the test proves nothing: %v", err)
	} else {
		t.Logf("one of the runner's requests rejected: %s %s", ev.Verb, ev.RequestURI)
	}
	for _, r := range runs {
		final := w.waitFinal(r.ID, 8*time.Minute)
		want, reason := api.StateSucceeded, ""
		if strings.HasSuffix(final.WorkflowPath, "w8.yml") {
			want, reason = api.StateFailed, api.ReasonExitCode
		}
		if final.State != want || final.Reason != reason {
			t.Errorf("%s: %s, want %s %s; runner log:\n%s", final.WorkflowPath, describe(final), want, reason, runner.output())
		}
	}
	t.Logf("API Priority and Fairness rejected %d requests of the runner's identity (the load's included)", k.rejectedBy(t, name)-before)
}

// loadAsUserAgent is the user agent of loadAs's clients.
const loadAsUserAgent = "knotless-e2e-apf-load"

// loadAs lists the namespace's pods as the runner's ServiceAccount
// (k.kubeconfig) from n clients in a loop until ctx ends, keeping
// its API Priority and Fairness level busy; the returned channel closes
// when they have stopped.
func (k *kubeRunner) loadAs(t testing.TB, ctx context.Context, n int) <-chan struct{} {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.UserAgent = loadAsUserAgent
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				// No client-side retry (it would wait out each 429's
				// Retry-After, leaving the level free); a short pause
				// after a rejection, none after an answer.
				err := client.CoreV1().RESTClient().Get().Namespace(k.ns).Resource("pods").MaxRetries(0).Do(ctx).Error()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	return done
}
