package kubetest_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

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

// BenchmarkBareRun: Baseline.Run (create → Running and Ready, exec `true`,
// delete → gone), the floor of a kube executor's one-step run; reports the
// median of each phase. "sleep" is RestrictedPod (PID 1 `sleep` ignores
// SIGTERM, so deletion waits out the 1 s grace period); "trap" runs a PID
// 1 that exits on SIGTERM.
func BenchmarkBareRun(b *testing.B) {
	for _, pid1 := range []string{"sleep", "trap"} {
		b.Run("pid1="+pid1, func(b *testing.B) {
			_, bl := newBaseline(b)
			if pid1 == "trap" {
				bl.Pod = func(ns string) *corev1.Pod {
					p := kubetest.RestrictedPod(ns, "")
					p.Spec.Containers[0].Command = []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}
					return p
				}
			}
			var start, exec, del, total []time.Duration
			for range b.N {
				ctx, cancel := context.WithTimeout(b.Context(), 2*kubetest.PodStartTimeout)
				r, err := bl.Run(ctx)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				start, exec, del, total = append(start, r.Start), append(exec, r.Exec), append(del, r.Delete), append(total, r.Total)
			}
			b.StopTimer()
			for name, s := range map[string][]time.Duration{"start": start, "exec": exec, "delete": del, "total": total} {
				b.ReportMetric(median(s), "ms-"+name+"/op")
			}
		})
	}
}

// BenchmarkExecThroughput sends 100 MB on an exec's STDIN to `wc -c` (the
// count is checked) and reads 100 MB from `dd if=/dev/zero bs=64k` on its
// STDOUT, in a pod whose CPU limit is 100m (RestrictedPod's) or 1 core:
// the process and its pipes are throttled by that limit. MB/s is
// 10^6 bytes per second.
func BenchmarkExecThroughput(b *testing.B) {
	const size = 100_000_000
	for _, cpu := range []string{"100m", "1"} {
		_, bl := newBaseline(b)
		bl.Pod = func(ns string) *corev1.Pod {
			p := kubetest.RestrictedPod(ns, "")
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse(cpu)
			return p
		}
		ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
		pod, _, err := bl.CreateRunning(ctx)
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		if _, err := bl.ExecTrue(ctx, pod); err != nil {
			cancel()
			b.Fatal(err)
		}
		b.Run("stdin/cpu="+cpu, func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				var out strings.Builder
				_, code, err := bl.Exec(ctx, pod, []string{"wc", "-c"}, &zeros{n: size}, &out, nil)
				if err != nil || code != 0 || strings.TrimSpace(out.String()) != "100000000" {
					b.Fatalf("wc -c of 100 MB: exit %d, err %v, counted %q", code, err, out.String())
				}
			}
		})
		b.Run("stdout/cpu="+cpu, func(b *testing.B) {
			b.SetBytes(size)
			for range b.N {
				var w counter
				_, code, err := bl.Exec(ctx, pod, []string{"dd", "if=/dev/zero", "bs=65536", "count=1526"}, nil, &w, nil)
				if err != nil || code != 0 || w.n < size {
					b.Fatalf("dd to stdout: exit %d, err %v, got %d bytes", code, err, w.n)
				}
			}
		})
		cancel()
	}
}

func median(s []time.Duration) float64 {
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return float64(m) / float64(time.Millisecond)
}

type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
