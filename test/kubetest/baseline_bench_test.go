package kubetest_test

import (
	"context"
	"testing"
	"time"

	"knotless.dev/knotless/test/kubetest"
)

// newBaseline sets up a restricted namespace, a runner ServiceAccount
// (PodRunnerRules) and a Baseline as that ServiceAccount.
func newBaseline(b *testing.B) (*kubetest.Cluster, *kubetest.Baseline) {
	c := kubetest.Connect(b)
	ns := c.RestrictedNamespace(b)
	_, cfg := c.ServiceAccountKubeconfig(b, ns, "runner", kubetest.PodRunnerRules())
	bl, err := kubetest.NewBaseline(cfg, ns)
	if err != nil {
		b.Fatal(err)
	}
	return c, bl
}

// BenchmarkBareCreateRunning: Baseline.CreateRunning (create → Get every
// 20 ms sees Running and Ready), pod deleted and gone between samples.
func BenchmarkBareCreateRunning(b *testing.B) {
	_, bl := newBaseline(b)
	var samples []time.Duration
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(b.Context(), kubetest.PodStartTimeout)
		pod, d, err := bl.CreateRunning(ctx)
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		samples = append(samples, d)
		b.StopTimer()
		if _, err := bl.DeleteGone(ctx, pod); err != nil {
			cancel()
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
	}
	b.StopTimer()
	reportMedian(b, samples)
}

// BenchmarkBareExecTrue: Baseline.ExecTrue in one running pod, after one
// warm-up exec.
func BenchmarkBareExecTrue(b *testing.B) {
	_, bl := newBaseline(b)
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	pod, _, err := bl.CreateRunning(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := bl.ExecTrue(ctx, pod); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	b.ResetTimer()
	for range b.N {
		d, err := bl.ExecTrue(ctx, pod)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, d)
	}
	b.StopTimer()
	reportMedian(b, samples)
}
