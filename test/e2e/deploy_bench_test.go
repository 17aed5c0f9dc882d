package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// BenchmarkDeploy_ApplyToRunnerSession measures, on the local cluster,
// from the deployment's first command (create the namespace and the
// credential Secret, `kubectl apply -k` of deploy/kubernetes; a fresh
// namespace each time) to the server's "runner session started": the
// pod's scheduling, the init container fetching and checking both
// programs, and the runner's start and first call. It also reports the
// init container's own run time (the kubelet's timestamps, 1 s
// resolution). Medians, in ms.
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench Deploy_ApplyToRunnerSession -benchtime 5x ./test/e2e
func BenchmarkDeploy_ApplyToRunnerSession(b *testing.B) {
	c := kubetest.Connect(b)
	host := c.HostIP(b)
	url := serveFiles(b, host, deployBuild(b))
	ensureRunnerBaseImage(b, c)
	w := newWorldAt(b, host+":0", 30*time.Second)
	rid := w.registerRunner("k8s-bench")
	var sessions, inits []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		before := strings.Count(w.server.output(), "runner session started")
		start := time.Now()
		d := applyRunner(b, c, "emptydir", url, rid.state, false)
		testwait.Until(b, 3*time.Minute, "the runner pod's session", func() (bool, string) {
			return strings.Count(w.server.output(), "runner session started") > before, ""
		})
		sessions = append(sessions, time.Since(start))
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		list, err := c.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=knotless-runner"})
		if err == nil && len(list.Items) > 0 {
			for _, s := range list.Items[0].Status.InitContainerStatuses {
				if term := s.State.Terminated; term != nil {
					inits = append(inits, term.FinishedAt.Sub(term.StartedAt.Time))
				}
			}
		}
		// One runner pod per credential at a time: remove this one first.
		if out, err := d.kubectl(ctx, "delete", "-k", ".", "--timeout=150s"); err != nil {
			cancel()
			b.Fatalf("%v\n%s", err, out)
		}
		cancel()
		b.StartTimer()
	}
	b.StopTimer()
	ms, mi := median(sessions), median(inits)
	b.ReportMetric(float64(ms.Milliseconds()), "apply-to-session-ms")
	b.ReportMetric(float64(mi.Milliseconds()), "init-container-ms")
	b.Logf("apply → runner session: %v (median %v); init container: %v (median %v)", sessions, ms, inits, mi)
}
