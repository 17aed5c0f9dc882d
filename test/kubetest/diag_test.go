package kubetest_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"

	"k8s.io/apimachinery/pkg/api/resource"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"knotless.dev/knotless/test/kubetest"
)

func TestDiagStart(t *testing.T) {
	if os.Getenv("DIAG") == "" {
		t.Skip()
	}
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	_, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	bl, _ := kubetest.NewBaseline(cfg, ns)
	ctx := t.Context()
	for i := 0; i < 8; i++ {
		name := "d" + string(rune('a'+i))
		pod := kubetest.RestrictedPod(ns, name)
		// a watcher started before the create
		w, err := bl.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		watchRunning := make(chan time.Duration, 1)
		go func() {
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok {
					if d, _ := kubetest.PodRunning.Done(p); d {
						watchRunning <- time.Since(start)
						return
					}
				}
			}
		}()
		if _, err := bl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var sched, running, ready time.Duration
		var gets int
		for ready == 0 {
			p, err := bl.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			gets++
			if err == nil {
				if sched == 0 && p.Spec.NodeName != "" {
					sched = time.Since(start)
				}
				if d, _ := kubetest.PodRunning.Done(p); d && running == 0 {
					running = time.Since(start)
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						ready = time.Since(start)
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		wr := <-watchRunning
		w.Stop()
		t0 := time.Now()
		var tw time.Duration
		if _, err := kubetest.WaitPod(ctx, bl.Client, ns, name, kubetest.PodRunning); err == nil {
			tw = time.Since(t0)
		}
		dd, err := bl.DeleteGone(ctx, name)
		t.Logf("pod %s: scheduled %v running(poll) %v ready(poll) %v running(watch) %v gets %d; WaitPod on running pod %v; delete→gone %v (%v)",
			name, sched.Round(time.Millisecond), running.Round(time.Millisecond), ready.Round(time.Millisecond), wr.Round(time.Millisecond), gets, tw.Round(time.Millisecond), dd.Round(time.Millisecond), err)
	}
}

func TestDiagExec(t *testing.T) {
	if os.Getenv("DIAG") == "" {
		t.Skip()
	}
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	_, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	bl, _ := kubetest.NewBaseline(cfg, ns)
	ctx := t.Context()
	pod, _, err := bl.CreateRunning(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bl.ExecTrue(ctx, pod)
	// TLS handshake to the API server
	u, _ := url.Parse(cfg.Host)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.CAData)
	if len(cfg.CAData) == 0 {
		b, _ := os.ReadFile(cfg.CAFile)
		pool.AppendCertsFromPEM(b)
	}
	var hs []time.Duration
	for range 10 {
		s := time.Now()
		conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: pool, ServerName: u.Hostname()})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, time.Since(s))
		conn.Close()
	}
	t.Logf("TLS dial+handshake to API server: %v", hs)
	var a, k []time.Duration
	for range 10 {
		d, err := bl.ExecTrue(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		a = append(a, d)
		s := time.Now()
		_, _, code, err := kubetest.Exec(ctx, cfg, ns, pod, kubetest.MainContainer, []string{"true"}, nil)
		if err != nil || code != 0 {
			t.Fatal(err, code)
		}
		k = append(k, time.Since(s))
	}
	t.Logf("baseline exec: %v", a)
	t.Logf("kubetest.Exec: %v", k)
	// runc and ctr below Kubernetes
	p, _ := bl.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	cid := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	var r, ct []time.Duration
	for i := range 10 {
		s := time.Now()
		out, err := exec.Command("runc", "--root", "/run/containerd/runc/k8s.io", "exec", cid, "true").CombinedOutput()
		if err != nil {
			t.Logf("runc: %v %s", err, out)
		}
		r = append(r, time.Since(s))
		s = time.Now()
		out, err = exec.Command("ctr", "--address", "/var/lib/knotless-test-cluster/run/containerd.sock", "-n", "k8s.io", "task", "exec", "--exec-id", "diag"+string(rune('a'+i)), cid, "true").CombinedOutput()
		if err != nil {
			t.Logf("ctr: %v %s", err, out)
		}
		ct = append(ct, time.Since(s))
	}
	t.Logf("runc exec: %v", r)
	t.Logf("ctr task exec: %v", ct)
	s := time.Now()
	exec.Command("ctr", "--address", "/var/lib/knotless-test-cluster/run/containerd.sock", "version").Run()
	t.Logf("ctr version (ctr start cost): %v", time.Since(s))
	s = time.Now()
	exec.Command("runc", "--version").Run()
	t.Logf("runc --version: %v", time.Since(s))
}

func TestDiagThroughput(t *testing.T) {
	if os.Getenv("DIAG") == "" {
		t.Skip()
	}
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	_, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	bl, _ := kubetest.NewBaseline(cfg, ns)
	if cpu := os.Getenv("DIAG_CPU"); cpu != "" {
		bl.Pod = func(ns string) *corev1.Pod {
			p := kubetest.RestrictedPod(ns, "")
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse(cpu)
			return p
		}
	}
	ctx := t.Context()
	pod, _, err := bl.CreateRunning(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bl.ExecTrue(ctx, pod)
	const n = 100_000_000
	for _, size := range []int64{} {
		var out, errb strings.Builder
		d, code, err := bl.Exec(ctx, pod, []string{"wc", "-c"}, &zeros{n: size}, &out, &errb)
		t.Logf("ws stdin %d: %v code %d err %v wc=%q %q: %.1f MB/s", size, d, code, err, out.String(), errb.String(), float64(size)/d.Seconds()/1e6)
		u := bl.Client.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: kubetest.MainContainer, Command: []string{"wc", "-c"}, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
		spdy, _ := remotecommand.NewSPDYExecutor(cfg, "POST", u)
		out.Reset()
		s := time.Now()
		err = spdy.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: &zeros{n: size}, Stdout: &out, Stderr: &errb})
		d = time.Since(s)
		t.Logf("spdy stdin %d: %v err %v wc=%q: %.1f MB/s", size, d, err, out.String(), float64(size)/d.Seconds()/1e6)
		u = bl.Client.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: kubetest.MainContainer, Command: []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
		spdy, _ = remotecommand.NewSPDYExecutor(cfg, "POST", u)
		var w counter
		s = time.Now()
		err = spdy.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &w, Stderr: &errb})
		d = time.Since(s)
		t.Logf("spdy stdout %d: %v err %v got %d: %.1f MB/s", size, d, err, w.n, float64(w.n)/d.Seconds()/1e6)
	}
	p, _ := bl.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	cid := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	ctrArgs := []string{"--address", "/var/lib/knotless-test-cluster/run/containerd.sock", "-n", "k8s.io", "task", "exec", "--exec-id"}
	for i := range 0 {
		var w counter
		cmd := exec.Command("ctr", append(ctrArgs, fmt.Sprint("tp", i), cid, "head", "-c", "100000000", "/dev/zero")...)
		cmd.Stdout = &w
		s := time.Now()
		err := cmd.Run()
		d := time.Since(s)
		t.Logf("ctr stdout: %v err %v got %d: %.1f MB/s", d, err, w.n, float64(w.n)/d.Seconds()/1e6)
		var out strings.Builder
		cmd = exec.Command("ctr", append(ctrArgs, fmt.Sprint("tq", i), cid, "wc", "-c")...)
		cmd.Stdin = &zeros{n: n}
		cmd.Stdout = &out
		s = time.Now()
		err = cmd.Run()
		d = time.Since(s)
		t.Logf("ctr stdin: %v err %v wc %q: %.1f MB/s", d, err, out.String(), float64(n)/d.Seconds()/1e6)
	}
	for _, argv := range [][]string{{"head", "-c", "100000000", "/dev/zero"}, {"dd", "if=/dev/zero", "bs=65536", "count=1526"}, {"dd", "if=/dev/zero", "bs=4096", "count=24414"}} {
		var w counter
		d, code, err := bl.Exec(ctx, pod, argv, nil, &w, nil)
		t.Logf("ws stdout %q: %v code %d err %v got %d: %.1f MB/s", argv, d, code, err, w.n, float64(w.n)/d.Seconds()/1e6)
	}
	for range 0 {
		var out, errb strings.Builder
		d, code, err := bl.Exec(ctx, pod, []string{"sh", "-c", "cat > /tmp/x; wc -c < /tmp/x; rm /tmp/x"}, &zeros{n: 10 << 20}, &out, &errb)
		t.Logf("cat>/tmp/x 10 MiB: %v code %d err %v out %q %q", d, code, err, out.String(), errb.String())
		out.Reset()
		d, code, err = bl.Exec(ctx, pod, []string{"sh", "-c", "cat > /dev/null; echo $?"}, &zeros{n: 10 << 20}, &out, &errb)
		t.Logf("cat>/dev/null 10 MiB: %v code %d err %v out %q %q", d, code, err, out.String(), errb.String())
		out.Reset()
		d, code, err = bl.Exec(ctx, pod, []string{"sh", "-c", "cat | wc -c"}, &zeros{n: 10 << 20}, &out, &errb)
		t.Logf("cat|wc 10 MiB: %v code %d err %v out %q %q", d, code, err, out.String(), errb.String())
	}
	for range 0 {
		d, code, err := bl.Exec(ctx, pod, []string{"sh", "-c", "cat > /dev/null"}, &zeros{n: n}, nil, nil)
		t.Logf("stdin 100 MB: %v code %d err %v: %.1f MB/s", d, code, err, n/d.Seconds()/1e6)
		var w counter
		d, code, err = bl.Exec(ctx, pod, []string{"head", "-c", "100000000", "/dev/zero"}, nil, &w, nil)
		t.Logf("stdout 100 MB: %v code %d err %v got %d: %.1f MB/s", d, code, err, w.n, float64(w.n)/d.Seconds()/1e6)
	}
}

func TestDiagDeleteAndClient(t *testing.T) {
	if os.Getenv("DIAG") == "" {
		t.Skip()
	}
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	_, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	s := time.Now()
	for range 100 {
		if _, err := kubernetes.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("kubernetes.NewForConfig: %v each", time.Since(s)/100)
	bl, _ := kubetest.NewBaseline(cfg, ns)
	ctx := t.Context()
	for _, variant := range []string{"sleep", "trap", "sleep", "trap", "sleep", "trap"} {
		if variant == "trap" {
			bl.Pod = func(ns string) *corev1.Pod {
				p := kubetest.RestrictedPod(ns, "")
				p.Spec.Containers[0].Command = []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}
				return p
			}
		} else {
			bl.Pod = nil
		}
		r, err := bl.Run(ctx)
		t.Logf("%s: start %v exec %v delete %v total %v err %v", variant, r.Start.Round(time.Millisecond), r.Exec.Round(time.Millisecond), r.Delete.Round(time.Millisecond), r.Total.Round(time.Millisecond), err)
	}
}
