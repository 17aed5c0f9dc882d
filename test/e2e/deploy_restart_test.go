package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// deployedRunner is the runner deployed from deploy/kubernetes (the
// emptyDir variant: a replaced pod starts with an empty work directory)
// as a pod of the local cluster, registered as name, and the world it
// serves.
func deployedRunner(t testing.TB, name string) (*world, *deployment) {
	t.Helper()
	c := kubetest.Connect(t)
	host := c.HostIP(t)
	progs := deployBuild(t)
	ensureRunnerBaseImage(t, c)
	url := serveFiles(t, host, progs)
	w := newWorldAt(t, host+":0", 30*time.Second)
	rid := w.registerRunner(name)
	return w, applyRunner(t, c, "emptydir", url, rid.state, true)
}

// runnerPod is the runner's running pod (not being deleted), or nil.
func (d *deployment) runnerPod(t testing.TB) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := d.c.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=knotless-runner"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return &list.Items[i]
		}
	}
	return nil
}

// countingRun pushes secondsWorkflow(n) for runner name and waits until
// its step printed line `from`.
func countingRun(t testing.TB, w *world, name string, n, from int) api.Run {
	t.Helper()
	files := secondsWorkflow(n)
	files[".knotless/workflows/ci.yml"] = strings.Replace(files[".knotless/workflows/ci.yml"], "steps:", "runners: ["+name+"]\nsteps:", 1)
	run := w.pushOne(files)
	w.waitRun(run.ID, 4*time.Minute, fmt.Sprintf("the step to print line %d", from), func(r api.Run) bool {
		return strings.Contains(w.stepLog(run.ID, 1), fmt.Sprintf("line %d\n", from))
	})
	return run
}

// `kubectl rollout restart` of the deployed runner in the middle of a
// 60-second step that prints a line a second: the old pod hands over and
// goes, the new pod (an empty work directory) adopts the job pod, which
// the Deployment owns, and the run succeeds with a whole log (no line
// lost or doubled), its second step in the same job pod.
func TestDeploy_RolloutRestartMidStepAdoptsTheJobPodAndTheLogIsWhole(t *testing.T) {
	w, d := deployedRunner(t, "k8s-restart")
	const n = 60
	run := countingRun(t, w, "k8s-restart", n, 5)
	old := d.runnerPod(t)
	if old == nil {
		t.Fatal("no runner pod")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d.must(t, ctx, "-n", d.ns, "rollout", "restart", "deploy/knotless-runner")
	testwait.Until(t, 3*time.Minute, "a new runner pod", func() (bool, string) {
		p := d.runnerPod(t)
		return p != nil && p.UID != old.UID, ""
	})
	final := w.waitFinal(run.ID, 4*time.Minute)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; runner pod:\n%s", describe(final), d.runnerLogs())
	}
	assertSecondsLog(t, w, run.ID, n)
	if logs := d.runnerLogs(); !strings.Contains(logs, "rebuilt the record of a run from the server's") ||
		!strings.Contains(logs, "attached to a step that was running already") {
		t.Errorf("the new runner pod does not say it adopted the run and attached to its step:\n%s", logs)
	}
}

// The runner's process killed (SIGKILL, as an OOM kill or a crash would)
// in the middle of the same step: the kubelet restarts the container in
// the same pod, whose emptyDir work directory kept the run's spool; the
// restarted runner takes the run over and it succeeds with a whole log.
func TestDeploy_RunnerProcessKilledMidStepRestartsInItsPodAndTheLogIsWhole(t *testing.T) {
	w, d := deployedRunner(t, "k8s-crash")
	const n = 60
	run := countingRun(t, w, "k8s-crash", n, 5)
	pod := d.runnerPod(t)
	pids := runnerPIDs(d.ns)
	if len(pids) != 1 {
		t.Fatalf("knotless-run processes of namespace %s: %v, want one", d.ns, pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 2*time.Minute, "the runner container to restart in its pod", func() (bool, string) {
		p := d.runnerPod(t)
		if p == nil || p.UID != pod.UID || len(p.Status.ContainerStatuses) == 0 {
			return false, "no pod, or another one"
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount >= 1 && cs.State.Running != nil, fmt.Sprintf("restarts %d", cs.RestartCount)
	})
	final := w.waitFinal(run.ID, 4*time.Minute)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; runner pod:\n%s", describe(final), d.runnerLogs())
	}
	assertSecondsLog(t, w, run.ID, n)
	if p := d.runnerPod(t); p == nil || p.UID != pod.UID {
		t.Errorf("the runner's pod was replaced, want its container restarted in place")
	}
}

// runnerPIDs are the host PIDs of knotless-run processes running in a
// pod of namespace ns (their environment's POD_NAMESPACE).
func runnerPIDs(ns string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv := bytes.Split(cmd, []byte{0})
		if len(argv) < 2 || filepath.Base(string(argv[0])) != "knotless-run" || string(argv[1]) != "run" {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		want := []byte("POD_NAMESPACE=" + ns)
		if slices.ContainsFunc(bytes.Split(env, []byte{0}), func(v []byte) bool { return bytes.Equal(v, want) }) {
			out = append(out, pid)
		}
	}
	return out
}

// BenchmarkDeploy_RunnerPodDeletedToStreamingAgain measures a restart of
// the deployed runner (emptyDir variant) under a run: from `kubectl
// delete pod` of the runner's pod (SIGTERM: it hands over and exits) to
// the first byte of the in-flight step's log that only its successor can
// have sent (the server's log of the step grows after the old pod is
// gone). The step prints a line every 100 ms; one run, b.N deletions in a
// row, each successor adopting the job pod from an empty work directory.
// Reported: the median (ms), and the phases of each sample in the log.
// make bench-restart runs 5.
func BenchmarkDeploy_RunnerPodDeletedToStreamingAgain(b *testing.B) {
	w, d := deployedRunner(b, "k8s-bench")
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
runners: [k8s-bench]
steps:
  - name: count
    run: i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done
`})
	w.waitRun(run.ID, 4*time.Minute, "the step to stream", func(r api.Run) bool {
		return strings.Contains(w.stepLog(run.ID, 1), "line 10\n")
	})
	logSize := func() int64 {
		for _, s := range w.run(run.ID).Steps {
			if s.Index == 1 {
				return s.LogSize
			}
		}
		return 0
	}
	var samples []time.Duration
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		old := d.runnerPod(b)
		if old == nil {
			b.Fatal("no runner pod")
		}
		t0 := time.Now()
		if err := d.c.Client.CoreV1().Pods(d.ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		var gone, running time.Duration
		testwait.Until(b, 2*time.Minute, "the old runner pod to be gone", func() (bool, string) {
			_, err := d.c.Client.CoreV1().Pods(d.ns).Get(ctx, old.Name, metav1.GetOptions{})
			return err != nil && strings.Contains(err.Error(), "not found"), fmt.Sprint(err)
		})
		gone = time.Since(t0)
		size := logSize()
		for {
			if running == 0 {
				if p := d.runnerPod(b); p != nil && p.UID != old.UID {
					running = time.Since(t0)
				}
			}
			if logSize() > size {
				break
			}
			if time.Since(t0) > 4*time.Minute {
				b.Fatalf("the successor did not stream within 4 minutes; runner pod:\n%s", d.runnerLogs())
			}
			time.Sleep(50 * time.Millisecond)
		}
		took := time.Since(t0)
		samples = append(samples, took)
		b.Logf("sample %d: old pod gone %s, new pod running %s, streaming again %s", i+1,
			gone.Round(time.Millisecond), running.Round(time.Millisecond), took.Round(time.Millisecond))
	}
	b.StopTimer()
	b.ReportMetric(float64(median(samples).Milliseconds()), "median-ms")
	b.ReportMetric(0, "ns/op")
	w.cliOK("", "run", "cancel", fmt.Sprint(run.ID))
}

// The failure this pins: kustomize rewrites every Role resourceName that
// equals a generated ConfigMap's name (it gave the Role's rule on the
// Deployment knotless-runner the ConfigMap's hashed name, and the runner
// could not read its owner). Built as `kubectl apply -k` builds it, the
// Role names the very Deployment the runner is told to own its job pods
// by.
func TestDeploy_RoleGrantsGetOnTheDeploymentTheRunnerNamesAsOwner(t *testing.T) {
	c := kubetest.Connect(t)
	for _, variant := range []string{"emptydir", "pvc"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := c.Kubectl(ctx, moduleRoot, "kustomize", filepath.Join("deploy", "kubernetes", "overlays", variant))
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", variant, err, out)
		}
		var deployName, owner string
		var granted []string
		for _, doc := range strings.Split(out, "\n---\n") {
			switch {
			case strings.Contains(doc, "\nkind: Deployment\n"):
				deployName = yamlField(doc, "metadata:\n  ", "name: ")
				if i := strings.Index(doc, "name: KNOTLESS_OWNER"); i >= 0 {
					owner = yamlField(doc[i:], "", "value: ")
				}
			case strings.Contains(doc, "\nkind: Role\n"):
				if i := strings.Index(doc, "- deployments"); i >= 0 {
					j := strings.LastIndex(doc[:i], "- apiGroups:")
					rule := doc[j:]
					if k := strings.Index(rule[1:], "- apiGroups:"); k >= 0 {
						rule = rule[:k+1]
					}
					if k := strings.Index(rule, "resourceNames:\n"); k >= 0 {
						granted = append(granted, strings.TrimSpace(strings.TrimPrefix(strings.SplitN(rule[k+len("resourceNames:\n"):], "\n", 2)[0], "  - ")))
					}
				}
			}
		}
		if deployName == "" || owner != "deployment/"+deployName || len(granted) != 1 || strings.TrimLeft(granted[0], "- ") != deployName {
			t.Errorf("%s: Deployment %q, KNOTLESS_OWNER %q, the Role grants get on deployments %q: want all the same Deployment", variant, deployName, owner, granted)
		}
	}
}

// yamlField is the value after key in doc, after the first after (a
// rough reader for kubectl's block-style output).
func yamlField(doc, after, key string) string {
	i := strings.Index(doc, after)
	if i < 0 {
		return ""
	}
	rest := doc[i+len(after):]
	j := strings.Index(rest, key)
	if j < 0 {
		return ""
	}
	v := strings.SplitN(rest[j+len(key):], "\n", 2)[0]
	return strings.Trim(strings.TrimSpace(v), `"'`)
}

// knotless-run doctor in the deployed runner's pod, as docs/kubernetes.md
// tells an operator to run it: with the runner's own configuration
// (KNOTLESS_* from the ConfigMap, its ServiceAccount, its state file) every
// check passes, the test job pod included (also the node and the API
// server unreachable from it: the local cluster's enforcer filters
// pod-to-node traffic).
func TestDeploy_DoctorInTheRunnerPodPassesEveryCheck(t *testing.T) {
	_, d := deployedRunner(t, "k8s-doctor")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := d.kubectl(ctx, "-n", d.ns, "exec", "deploy/knotless-runner", "-c", "runner", "--",
		"/opt/knotless/bin/knotless-run", "doctor", "--executor", "kube", "--state", "/var/run/knotless/runner.json")
	t.Logf("doctor (%v):\n%s", err, out)
	for _, want := range []string{"ok    credential accepted: runner k8s-doctor is approved", "ok    own pod: knotless-runner-",
		"ok    job pods' owner: Deployment/knotless-runner (uid ", "ok    may get deployments knotless-runner",
		"ok    namespace enforces Pod Security restricted", "ok    step with a secret over the stream", "ok    DNS works in a job pod",
		"ok    another pod ", "ok    test job pod removed"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor's output lacks %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "FAIL") {
			continue
		}
		t.Errorf("doctor failed a check: %s", line)
	}
}
