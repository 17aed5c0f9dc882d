package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/testwait"
)

// warmPodNames lists the namespace's warm pods of runner name that are
// not being deleted.
func (k *kubeRunner) warmPodNames(t testing.TB, runner string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := k.c.Client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelWarm + "=true," + agentenv.LabelRunner + "=" + runner})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// TestE2E_KubeWarmPodTakenByARunAndNoneLeftAfterARunnerKill: a runner
// with --warm-pods 1 keeps a warm pod; a pushed run takes it (its setup
// log says so) and succeeds; the runner SIGKILLed with a warm pod waiting
// and started again deletes the dead process's warm pod at its start and
// makes its own.
func TestE2E_KubeWarmPodTakenByARunAndNoneLeftAfterARunnerKill(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("kw1")
	args := append(k.args, "--warm-pods", "1")
	first := w.startRunner(rid, args...)
	var warm []string
	testwait.Until(t, 2*time.Minute, "a warm pod", func() (bool, string) {
		warm = k.warmPodNames(t, "kw1")
		return len(warm) == 1 && strings.Contains(first.output(), `msg="warm pod ready"`), strings.Join(warm, ", ")
	})
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": "on: {push: {}}\nsteps:\n  - run: echo ran in $(hostname)\n"})
	final := w.waitFinal(run.ID, 3*time.Minute)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s; runner log:\n%s", describe(final), first.output())
	}
	if setup := w.stepLog(run.ID, api.SetupStep); !strings.Contains(setup, "took the warm pod "+k.ns+"/"+warm[0]) {
		t.Errorf("the run did not take the warm pod %s:\n%s", warm[0], setup)
	}
	if got := w.stepLog(run.ID, 1); got != "ran in "+warm[0]+"\n" {
		t.Errorf("step log %q, want it in the warm pod %s", got, warm[0])
	}
	var second []string
	testwait.Until(t, 2*time.Minute, "the pool to make another warm pod", func() (bool, string) {
		second = k.warmPodNames(t, "kw1")
		return len(second) == 1 && second[0] != warm[0], strings.Join(second, ", ")
	})
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	restarted := w.startRunner(rid, args...)
	testwait.Until(t, 2*time.Minute, "the dead process's warm pod deleted and a new one ready", func() (bool, string) {
		now := k.warmPodNames(t, "kw1")
		for _, n := range now {
			if n == second[0] {
				return false, "still there: " + n
			}
		}
		return len(now) == 1 && strings.Contains(restarted.output(), `msg="warm pod ready"`), strings.Join(now, ", ")
	})
}
