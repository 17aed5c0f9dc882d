package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/executor/kube"
)

// deleteNamespace deletes ns (its pods with it) and waits up to 3 minutes
// for it to be gone, so that its pods' ends do not load the next figures.
func deleteNamespace(kc *localCluster, ns string) {
	ctx := context.Background()
	if err := kc.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return
	}
	_ = pollEvery(ctx, time.Second, 3*time.Minute, "namespace "+ns+" gone", func() (bool, error) {
		_, err := kc.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// bareContainer is the container name of the bare paths' pods.
const bareContainer = "w"

// barePod is pod i of a bare path: the image's user, "restricted", CPU
// requested but not limited (the path's floor, not the writer's quota).
func (w *logsWorld) barePod(i int, command []string) (*corev1.Pod, error) {
	cpu, err := resource.ParseQuantity(w.k.cpus)
	if err != nil {
		return nil, fmt.Errorf("-kube-log-cpus: %w", err)
	}
	mem, err := resource.ParseQuantity(w.k.memory)
	if err != nil {
		return nil, fmt.Errorf("-kube-log-memory: %w", err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kw-%03d", i), Namespace: w.ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: bareContainer, Image: w.k.image, Command: command,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
				},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}, nil
}

// stampWriter feeds what is written to it into a lineStream, stamped with
// the moment of the write.
type stampWriter struct{ s *lineStream }

func (sw stampWriter) Write(p []byte) (int, error) {
	sw.s.feed(p, time.Now().UnixNano())
	return len(p), nil
}

// bare measures a path without Knotless: pods of the image running the
// writer, read by this program either through a pods/exec of it (path
// "exec": the API server and the kubelet carry the bytes, kube.PodExec,
// as the kube executor's stream) or over a TCP connection the writer
// dials to this machine's pod-network address (path "dial").
// Long because it is one measurement in order: the pods, their barrier,
// the readers of every stream, the samples of each process, and the checks
// of every line; split, each part would take the others' state.
func (w *logsWorld) bare(ctx context.Context, path string) (*LogsPath, error) {
	n := w.k.streams
	cfg, err := clientcmd.BuildConfigFromFlags("", w.kc.Kubeconfig)
	if err != nil {
		return nil, err
	}
	var data net.Listener
	if path == "dial" {
		if data, err = net.Listen("tcp", net.JoinHostPort(w.host, "0")); err != nil {
			return nil, err
		}
		defer data.Close()
	}
	for i := range n {
		command := []string{"sleep", "1000000"}
		if path == "dial" {
			args := append(w.writerArgs(i), "-connect", data.Addr().String())
			command = []string{"sh", "-c", "while [ ! -x /tmp/kw ]; do sleep 1; done; exec /tmp/kw " + strings.Join(args, " ")}
		}
		pod, err := w.barePod(i, command)
		if err != nil {
			return nil, err
		}
		if _, err := w.kc.Client.CoreV1().Pods(w.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create pod %d: %w", i, err)
		}
	}
	if err := pollEvery(ctx, time.Second, w.startTimeout(), fmt.Sprintf("%d pods running", n), func() (bool, error) {
		l, err := w.kc.Client.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, nil
	}); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(w.writer)
	if err != nil {
		return nil, err
	}
	// The writer goes in as the agent does: on an exec's STDIN.
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var copyErr error
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			exe, err := kube.PodExec(cfg, w.kc.Client, w.ns, fmt.Sprintf("kw-%03d", i), bareContainer,
				[]string{"sh", "-c", "cat >/tmp/kw.part && chmod 755 /tmp/kw.part && mv /tmp/kw.part /tmp/kw"}, true)
			if err == nil {
				var out bytes.Buffer
				err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: bytes.NewReader(bin), Stdout: &out, Stderr: &out})
				if err != nil {
					err = fmt.Errorf("%w: %s", err, out.String())
				}
			}
			if err != nil {
				mu.Lock()
				copyErr = fmt.Errorf("copy the writer into pod %d: %w", i, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if copyErr != nil {
		return nil, copyErr
	}
	h := newDelayHist()
	streams := make([]*lineStream, n)
	for i := range streams {
		streams[i] = &lineStream{h: h}
	}
	var done sync.WaitGroup
	errs := make([]error, n)
	switch path {
	case "exec":
		for i := range n {
			done.Go(func() {
				exe, err := kube.PodExec(cfg, w.kc.Client, w.ns, fmt.Sprintf("kw-%03d", i), bareContainer,
					append([]string{"/tmp/kw"}, w.writerArgs(i)...), false)
				if err == nil {
					var stderr bytes.Buffer
					err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stampWriter{streams[i]}, Stderr: &stderr})
					if err != nil {
						err = fmt.Errorf("%w: %s", err, stderr.String())
					}
				}
				errs[i] = err
			})
		}
	case "dial":
		done.Add(n)
		go func() {
			seen := map[int]bool{}
			for {
				c, err := data.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					r := bufio.NewReaderSize(c, 64<<10)
					name, err := r.ReadString('\n')
					id, aerr := strconv.Atoi(strings.TrimSpace(name))
					mu.Lock()
					if err != nil || aerr != nil || id < 0 || id >= n || seen[id] {
						mu.Unlock()
						return
					}
					seen[id] = true
					mu.Unlock()
					defer done.Done()
					buf := make([]byte, 64<<10)
					for {
						k, err := r.Read(buf)
						streams[id].feed(buf[:k], time.Now().UnixNano())
						if err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	lp := &LogsPath{Path: path}
	start, got, err := w.release(ctx, path, n)
	if err != nil {
		return nil, err
	}
	smp := newSampler(map[string]int{"bench (the reader)": os.Getpid()})
	if err := smp.window(ctx, start, w.k.seconds); err != nil {
		return nil, err
	}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2*time.Minute + time.Duration(w.k.seconds*float64(time.Second))):
		lp.Problems = append(lp.Problems, "not every stream ended within 2 minutes of its end")
	case <-ctx.Done():
		return lp, ctx.Err()
	}
	smp.tail()
	lp.Late = w.bar.latecomers() + n - got
	for i, err := range errs {
		if err != nil {
			streams[i].problem("exec: %v", err)
		}
	}
	summarizeStreams(lp, h, streams, w.lines())
	lp.Costs, lp.BusyCores = smp.costs(float64(lp.Delivered) / 1e6)
	return lp, nil
}
