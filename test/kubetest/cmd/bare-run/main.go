// Command bare-run is the bare client-go program a whole `knotless-run
// exec --executor kube` process is measured against
// (BenchmarkE2E_KubeExecWholeProcess): one process that loads a
// kubeconfig, builds one clientset, creates the hardened job pod of a
// one-step run (kube.BenchPod: the pod Knotless makes, a shell as PID 1
// that exits on SIGTERM), polls Get every 20 ms until it is Running and
// Ready, execs `true` once over WebSocket, deletes the pod with grace
// period 0 and polls Get every 20 ms until it is gone (kubetest.Baseline).
// It prints the three phases in ms and exits 0, or prints the error and
// exits 1.
//
//	bare-run --kubeconfig FILE --namespace NS [--cpus 1] [--memory 128Mi]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/test/kubetest"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig `file`")
	namespace := flag.String("namespace", "default", "namespace of the pod")
	cpus := flag.String("cpus", "1", "CPU requests = limits of the pod (Kubernetes quantity)")
	memory := flag.String("memory", "128Mi", "memory requests = limits of the pod (Kubernetes quantity)")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *cpus, *memory, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bare-run:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, cpus, memory string, timeout time.Duration) error {
	cpu, err := resource.ParseQuantity(cpus)
	if err != nil {
		return fmt.Errorf("--cpus: %w", err)
	}
	mem, err := resource.ParseQuantity(memory)
	if err != nil {
		return fmt.Errorf("--memory: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	base, err := kubetest.NewBaseline(cfg, namespace)
	if err != nil {
		return err
	}
	base.DeleteGracePeriod = ptr.To[int64](0)
	base.Pod = func(ns string) *corev1.Pod {
		p := kube.BenchPod(ns, kubetest.MainContainer)
		for _, r := range []corev1.ResourceList{p.Spec.Containers[0].Resources.Requests, p.Spec.Containers[0].Resources.Limits} {
			r[corev1.ResourceCPU] = cpu
			r[corev1.ResourceMemory] = mem
		}
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := base.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("pod %s: create → Running %d ms, exec true %d ms, delete (grace 0) → gone %d ms\n",
		r.Pod, r.Start.Milliseconds(), r.Exec.Milliseconds(), r.Delete.Milliseconds())
	return nil
}
