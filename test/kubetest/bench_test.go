package kubetest_test

// Figures for the cluster (issue 3): run with a fixed count, e.g.
//
//	go test ./test/kubetest -run '^$' -bench . -benchtime 20x
//
// Each reports the median of its b.N samples as ms-median/op (ns/op is the
// mean, setup excluded).

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/test/kubetest"
)

func reportMedian(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	m := samples[len(samples)/2]
	if len(samples)%2 == 0 {
		m = (samples[len(samples)/2-1] + m) / 2
	}
	b.ReportMetric(float64(m)/float64(time.Millisecond), "ms-median/op")
}

// BenchmarkPodCreateToRunning measures, through client-go as the runner's
// ServiceAccount, the time from the create request until a watch sees the
// job-base pod Running (kubetest.PodRunning).
func BenchmarkPodCreateToRunning(b *testing.B) {
	c := kubetest.Connect(b)
	ns := c.RestrictedNamespace(b)
	_, cfg := c.ServiceAccountKubeconfig(b, ns, "runner", kubetest.PodRunnerRules())
	client := mustClient(b, cfg)
	pods := client.CoreV1().Pods(ns)
	var samples []time.Duration
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(b.Context(), kubetest.PodStartTimeout)
		start := time.Now()
		pod, err := pods.Create(ctx, kubetest.RestrictedPod(ns, ""), metav1.CreateOptions{})
		if err != nil {
			cancel()
			b.Fatalf("create pod: %v", err)
		}
		if _, err := kubetest.WaitPod(ctx, client, ns, pod.Name, kubetest.PodRunning); err != nil {
			cancel()
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
		b.StopTimer()
		// Delete and wait, so pods being torn down do not slow the next start.
		if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}); err != nil {
			cancel()
			b.Fatalf("delete pod: %v", err)
		}
		if _, err := kubetest.WaitPod(ctx, client, ns, pod.Name, kubetest.PodGone); err != nil {
			cancel()
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
	}
	b.StopTimer()
	reportMedian(b, samples)
}

// BenchmarkExecRoundTrip measures one exec of `true` (no STDIN) in a running
// job-base pod through client-go as the runner's ServiceAccount: upgrade,
// run, exit status.
func BenchmarkExecRoundTrip(b *testing.B) {
	c := kubetest.Connect(b)
	ns := c.RestrictedNamespace(b)
	_, cfg := c.ServiceAccountKubeconfig(b, ns, "runner", kubetest.PodRunnerRules())
	pod := c.StartPod(b, mustClient(b, cfg), kubetest.RestrictedPod(ns, "exec"))
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	if err := kubetest.WaitExecReady(ctx, cfg, ns, pod.Name, kubetest.MainContainer); err != nil {
		b.Fatal(err)
	}
	cancel()
	var samples []time.Duration
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
		start := time.Now()
		_, stderr, code, err := kubetest.Exec(ctx, cfg, ns, pod.Name, kubetest.MainContainer, []string{"true"}, nil)
		samples = append(samples, time.Since(start))
		cancel()
		if err != nil || code != 0 {
			b.Fatalf("exec true: exit %d, err %v, stderr %q", code, err, stderr)
		}
	}
	b.StopTimer()
	reportMedian(b, samples)
}

func mustClient(tb testing.TB, cfg *rest.Config) kubernetes.Interface {
	tb.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatalf("make client: %v", err)
	}
	return client
}
