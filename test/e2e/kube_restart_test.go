package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// runnerDeployment stands for the runner's Deployment: the job pods'
// owner (knotless-run --owner deployment/NAME).
const runnerDeployment = "knotless-runner"

// newOwnedKubeRunner is newKubeRunner with the restart design of
// deploy/kubernetes: the runner's Role also gets get on its Deployment
// (made here, as the admin, with no replicas: the runner runs as this
// test's process), and the runner gives the Deployment as the job pods'
// owner.
func newOwnedKubeRunner(t testing.TB) *kubeRunner {
	t.Helper()
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	rules := append(kubetest.PodRunnerRules(), rbacv1.PolicyRule{
		APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{runnerDeployment}, Verbs: []string{"get"},
	})
	path, _ := c.ServiceAccountKubeconfig(t, ns, "runner", rules)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tmpl := kubetest.RestrictedPod(ns, "")
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	sel := map[string]string{"app.kubernetes.io/name": runnerDeployment}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: runnerDeployment, Labels: sel},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: sel},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: tmpl.Spec},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the runner's Deployment: %v", err)
	}
	return &kubeRunner{c: c, ns: ns, kubeconfig: path, args: []string{
		"--executor", "kube", "--kubeconfig", path, "--namespace", ns, "--owner", "deployment/" + runnerDeployment,
		"--image", kubetest.JobBaseImage, "--cpus", "200m", "--memory", "128Mi", "--disk", "256Mi",
	}}
}

// secondsWorkflow is one step that records its start (recordStart) and
// prints "line 1" .. "line n", one a second, then a step that says which
// pod it ran in and how often the first started (printStarts).
func secondsWorkflow(n int) map[string]string {
	return map[string]string{".knotless/workflows/ci.yml": fmt.Sprintf(`on:
  push: {}
steps:
  - name: count
    run: |
      %s
      echo "step pid $$ on $(hostname)"
      i=1
      while [ $i -le %d ]; do echo "line $i"; i=$((i+1)); sleep 1; done
      echo done
  - name: after
    run: |
      echo "second step on $(hostname)"
      %s
`, recordStart, n, printStarts)}
}

// assertSecondsLog checks secondsWorkflow's logs: one pid line, every
// numbered line once and in order, done; the second step in the same pod;
// the first step started once (assertStartedOnce).
func assertSecondsLog(t *testing.T, w *world, run int64, n int) {
	t.Helper()
	log := withoutMarkers(t, w.stepLog(run, 1), -1) // a restart; reconnects as they come
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	if len(lines) != n+2 || !strings.HasPrefix(lines[0], "step pid ") || lines[n+1] != "done" {
		t.Fatalf("step log has %d lines, want %d (a pid line, %d numbered, done):\n%s", len(lines), n+2, n, log)
	}
	for i := 1; i <= n; i++ {
		if lines[i] != fmt.Sprintf("line %d", i) {
			t.Fatalf("step log line %d is %q: lost, repeated or out of order\n%s", i+1, lines[i], log)
		}
	}
	host := lines[0][strings.Index(lines[0], " on ")+4:]
	second := w.stepLog(run, 2)
	if !strings.HasPrefix(second, "second step on "+host+"\n") {
		t.Errorf("step 2 log %q, want it in the same pod %s", second, host)
	}
	assertStartedOnce(t, log, second)
}

// The runner pod replaced (rollout restart, upgrade, eviction) with an
// emptyDir work directory, in the middle of a 60-second step printing a
// line a second: the old runner gets SIGTERM, hands over and exits 0
// well within the pod's grace; the job pod, owned by the Deployment, goes
// on; the server keeps the run through the handover grace (longer than
// the lease); the successor, same credential but an empty work directory,
// finds the job pod by its labels, rebuilds the run's record from the
// server's, attaches, and the run succeeds with a whole log (no line lost
// or doubled) and its second step in the same pod.
func TestE2E_KubeRunnerPodReplacedMidStepWithAnEmptyWorkDirIsAdoptedAndTheLogIsWhole(t *testing.T) {
	t.Parallel()
	k := newOwnedKubeRunner(t)
	w := newWorld(t, 5*time.Second)
	rid := w.registerRunner("kr-replaced")
	old := w.startRunner(rid, k.args...)
	const n = 60
	run := w.pushOne(secondsWorkflow(n))
	w.waitRun(run.ID, 2*time.Minute, "the step to print line 5", func(r api.Run) bool {
		return strings.Contains(w.stepLog(run.ID, 1), "line 5\n")
	})
	sent := time.Now()
	old.signal(t, syscall.SIGTERM)
	if code := old.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM, want 0:\n%s", code, old.output())
	}
	t.Logf("the runner exited %s after SIGTERM (the deployment's terminationGracePeriodSeconds: 60)", time.Since(sent).Round(time.Millisecond))
	if !strings.Contains(old.output(), "handed over") {
		t.Fatalf("the runner does not say it handed over:\n%s", old.output())
	}
	pods := k.pods(t, "kr-replaced")
	if len(pods) != 1 {
		t.Fatalf("job pods after the handover: %v, want the run's one pod", pods)
	}
	// Longer than the lease: the handover grace keeps the run.
	time.Sleep(2 * w.lease)
	if r := w.run(run.ID); r.State != api.StateRunning {
		t.Fatalf("%s after the handover, want running", describe(r))
	}
	next := *rid
	next.work = rid.work + "-next-pod" // the new pod's emptyDir
	successor := w.startRunner(&next, k.args...)
	final := w.waitFinal(run.ID, 3*time.Minute)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; successor's log:\n%s\nsetup log:\n%s", describe(final), successor.output(), w.stepLog(run.ID, api.SetupStep))
	}
	if !strings.Contains(successor.output(), "rebuilt the record of a run from the server's") {
		t.Errorf("the successor does not say it rebuilt the run's record:\n%s", successor.output())
	}
	if !strings.Contains(successor.output(), "attached to a step that was running already") {
		t.Errorf("the successor does not say it attached to the running step:\n%s", successor.output())
	}
	assertSecondsLog(t, w, run.ID, n)
	if setup := w.stepLog(run.ID, api.SetupStep); !strings.Contains(setup, "took the run over from an earlier runner process") {
		t.Errorf("the setup log does not say the run was taken over:\n%s", setup)
	}
	testwait.Until(t, 30*time.Second, "the job pod to be gone", func() (bool, string) {
		left := k.pods(t, "kr-replaced")
		return len(left) == 0, strings.Join(left, ", ")
	})
	successor.signal(t, syscall.SIGINT)
	successor.wait(t, 30*time.Second)
}

// A second runner pod with the same credential (two replicas by mistake,
// or a successor while the old pod still runs) supersedes the first: the
// first stops at once (exit 1) without touching the run, and the second,
// on its own work directory, adopts the run's job pod; the run succeeds
// with a whole log. Two pods never both run the job.
func TestE2E_KubeSecondRunnerPodWithOneCredentialSupersedesTheFirstAndAdoptsItsRun(t *testing.T) {
	t.Parallel()
	k := newOwnedKubeRunner(t)
	w := newWorld(t, 10*time.Second)
	rid := w.registerRunner("kr-twice")
	first := w.startRunner(rid, k.args...)
	const n = 20
	run := w.pushOne(secondsWorkflow(n))
	w.waitRun(run.ID, 2*time.Minute, "the step to print line 3", func(r api.Run) bool {
		return strings.Contains(w.stepLog(run.ID, 1), "line 3\n")
	})
	other := *rid
	other.work = rid.work + "-other-pod"
	second := w.startRunner(&other, k.args...)
	if code := first.wait(t, 60*time.Second); code != 1 {
		t.Fatalf("the first runner exited %d, want 1 (superseded):\n%s", code, first.output())
	}
	final := w.waitFinal(run.ID, 3*time.Minute)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; second runner's log:\n%s", describe(final), second.output())
	}
	assertSecondsLog(t, w, run.ID, n)
	second.signal(t, syscall.SIGINT)
	second.wait(t, 30*time.Second)
}

// The job pod of a run is deleted while no runner holds it (between the
// old runner pod's handover and its successor): the successor ends the
// run errored/pod-lost, the one reason a run is lost in a restart.
func TestE2E_KubeJobPodGoneDuringTheHandoverEndsPodLost(t *testing.T) {
	t.Parallel()
	k := newOwnedKubeRunner(t)
	w := newWorld(t, 5*time.Second)
	rid := w.registerRunner("kr-lost")
	old := w.startRunner(rid, k.args...)
	run := w.pushOne(secondsWorkflow(600))
	w.waitRun(run.ID, 2*time.Minute, "the step to print line 2", func(r api.Run) bool {
		return strings.Contains(w.stepLog(run.ID, 1), "line 2\n")
	})
	old.signal(t, syscall.SIGTERM)
	if code := old.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM:\n%s", code, old.output())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.c.Client.CoreV1().Pods(k.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: agentenv.LabelRunner + "=kr-lost"}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Minute, "the job pod to be gone", func() (bool, string) {
		left := k.pods(t, "kr-lost")
		return len(left) == 0, strings.Join(left, ", ")
	})
	next := *rid
	next.work = rid.work + "-next-pod"
	successor := w.startRunner(&next, k.args...)
	final := w.waitFinal(run.ID, 2*time.Minute)
	if final.State != api.StateErrored || final.Reason != api.ReasonPodLost {
		t.Fatalf("%s, want errored/pod-lost; successor's log:\n%s", describe(final), successor.output())
	}
	successor.signal(t, syscall.SIGINT)
	successor.wait(t, 30*time.Second)
}

// --capacity 3: one runner, one credential, three runs at once, each in a
// job pod of its own (the first design of the kube runner needed a
// registration and a Deployment per parallel job).
func TestE2E_KubeCapacityThreeRunsThreeRunsAtOnceEachInItsOwnPod(t *testing.T) {
	t.Parallel()
	k := newOwnedKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("kr-three")
	runner := w.startRunner(rid, append(k.args, "--capacity", "3")...)
	files := map[string]string{}
	for i := 1; i <= 3; i++ {
		files[fmt.Sprintf(".knotless/workflows/w%d.yml", i)] = `on:
  push: {}
steps:
  - name: hold
    run: echo "pod $(hostname)"; sleep 20
`
	}
	runs := w.push(files, 3)
	hosts := map[string]bool{}
	testwait.Until(t, 3*time.Minute, "the three runs' steps to run at once", func() (bool, string) {
		clear(hosts)
		for _, r := range runs {
			if got := w.run(r.ID); api.IsFinal(got.State) {
				t.Fatalf("run %d ended before the three ran at once: %s\nrunner log:\n%s", r.ID, describe(got), runner.output())
			}
			if log := w.stepLog(r.ID, 1); strings.HasPrefix(log, "pod ") {
				hosts[strings.TrimSpace(strings.TrimPrefix(log, "pod "))] = true
			}
		}
		return len(hosts) == 3, fmt.Sprintf("%d runs in their steps; job pods %v", len(hosts), k.pods(t, "kr-three"))
	})
	for _, r := range runs {
		if final := w.waitFinal(r.ID, 2*time.Minute); final.State != api.StateSucceeded {
			t.Fatalf("%s, want succeeded", describe(final))
		}
	}
	runner.signal(t, syscall.SIGINT)
	runner.wait(t, 30*time.Second)
}
