package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/testwait"
)

// warmExecutor is an executor keeping n warm pods, its pool started (as
// the runner's Sweep at its start does).
func (f *fixture) warmExecutor(t *testing.T, n int) *kube.Executor {
	t.Helper()
	cfg := f.config()
	cfg.WarmPods, cfg.Capacity = n, 4
	e := f.executor(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Sweep(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// warmPods are the namespace's warm pods that run, by UID.
func (f *fixture) warmPods(t *testing.T) map[types.UID]corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := f.c.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelWarm + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[types.UID]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.UID] = p
		}
	}
	return out
}

// waitWarm waits until e has a warm pod ready that is not in old, and
// returns it.
func (f *fixture) waitWarm(t *testing.T, e *kube.Executor, old map[types.UID]bool) corev1.Pod {
	t.Helper()
	var got corev1.Pod
	testwait.Until(t, 2*time.Minute, "a new warm pod ready", func() (bool, string) {
		if ready, _, _ := e.WarmPool(); ready == 0 {
			return false, "none ready"
		}
		for uid, p := range f.warmPods(t) {
			if !old[uid] {
				got = p
				return true, ""
			}
		}
		return false, "the ready ones are old"
	})
	return got
}

// TestKube_ClaimTakesAWarmPodAndNeverReusesIt: a claim takes the warm pod
// (the same UID; its setup log says so; no pod start), the run is served
// by its agent adopted for it, and the pod never serves a second run: the
// pool makes another, which the next claim takes.
func TestKube_ClaimTakesAWarmPodAndNeverReusesIt(t *testing.T) {
	f := newFixture(t)
	e := f.warmExecutor(t, 1)
	first := f.waitWarm(t, e, nil)
	spec := f.spec(t, runID("warm"))
	log := &lockedLog{}
	spec.Log = log
	s := f.prepare(t, e, spec)
	if got := podOf(t, s); got != first.Name {
		t.Fatalf("the run got pod %s, not the warm pod %s\n%s", got, first.Name, log.String())
	}
	if !strings.Contains(log.String(), "took the warm pod "+f.ns+"/"+first.Name) {
		t.Errorf("the setup log does not say the run took the warm pod:\n%s", log.String())
	}
	stored := f.storedPod(t, first.Name)
	if stored.UID != first.UID || stored.Labels[kube.LabelWarm] != "" || stored.Labels[agentenv.LabelRun] != spec.ID {
		t.Errorf("the claimed pod's labels: %v (uid %s, want %s)", stored.Labels, stored.UID, first.UID)
	}
	res, out, err := runStep(t, s, "1", "pwd; grep -o '\"run\":\"[^\"]*\"' /knotless/state/agent.json", time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "/workspace\n\"run\":\""+spec.ID+"\"\n" {
		t.Errorf("a step in the warm pod: %+v %v %q", res, err, out)
	}
	if err := s.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := f.waitWarm(t, e, map[types.UID]bool{first.UID: true})
	spec2 := f.spec(t, runID("warm2"))
	s2 := f.prepare(t, e, spec2)
	if got := podOf(t, s2); got != second.Name || got == first.Name {
		t.Errorf("the second run got pod %s; the pool's next was %s, the first run's %s", got, second.Name, first.Name)
	}
	if _, _, taken := e.WarmPool(); taken != 2 {
		t.Errorf("%d warm pods taken, want 2", taken)
	}
}

// TestKube_WarmPodHoldsNoRepositoryDataBeforeItsClaim: a warm pod is the
// same whatever repository later claims it: no run's labels, no
// environment variables, an empty workspace and HOME.
func TestKube_WarmPodHoldsNoRepositoryDataBeforeItsClaim(t *testing.T) {
	f := newFixture(t)
	e := f.warmExecutor(t, 1)
	wp := f.waitWarm(t, e, nil)
	stored := f.storedPod(t, wp.Name)
	for k := range stored.Labels {
		switch k {
		case agentenv.LabelManagedBy, agentenv.LabelRunner, agentenv.LabelRun, kube.LabelWarm:
		default:
			t.Errorf("the warm pod has label %s", k)
		}
	}
	if !strings.HasPrefix(stored.Labels[agentenv.LabelRun], "warm-") {
		t.Errorf("the warm pod's run label is %q", stored.Labels[agentenv.LabelRun])
	}
	for _, c := range stored.Spec.Containers {
		if len(c.Env) > 0 || len(c.EnvFrom) > 0 {
			t.Errorf("container %s has environment variables: %v %v", c.Name, c.Env, c.EnvFrom)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := f.podExec(ctx, wp.Name, "ls -A /workspace /home/knotless /tmp; ls /knotless/state/steps 2>/dev/null | wc -l")
	if err != nil || !emptyListing(string(out)) {
		t.Errorf("the warm pod holds files: %q %v", out, err)
	}
}

// emptyListing reports whether ls -A of empty directories printed only
// their headers, in any order, and no step directories.
func emptyListing(out string) bool {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !strings.HasSuffix(line, ":") && line != "0" {
			return false
		}
	}
	return true
}

// TestKube_DeletedWarmPodIsNoticedAndReplaced: `kubectl delete` of a warm
// pod leaves the pool one short for moments only.
func TestKube_DeletedWarmPodIsNoticedAndReplaced(t *testing.T) {
	f := newFixture(t)
	e := f.warmExecutor(t, 1)
	wp := f.waitWarm(t, e, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.c.Client.CoreV1().Pods(f.ns).Delete(ctx, wp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitWarm(t, e, map[types.UID]bool{wp.UID: true})
}

// TestKube_JobPodsByPhaseCountWarmAndClaimedPods: the runner's
// knotless_runner_job_pods gauge reads EnvironmentsByPhase: a ready warm
// pod counts as Warm, and once a run claims it, as Running.
func TestKube_JobPodsByPhaseCountWarmAndClaimedPods(t *testing.T) {
	f := newFixture(t)
	e := f.warmExecutor(t, 1)
	f.waitWarm(t, e, nil)
	testwait.Until(t, 30*time.Second, "the warm pod counted as Warm", func() (bool, string) {
		got := e.EnvironmentsByPhase()
		return got["Warm"] == 1, fmt.Sprint(got)
	})
	f.prepare(t, e, f.spec(t, runID("phase")))
	testwait.Until(t, 30*time.Second, "the claimed pod counted as Running", func() (bool, string) {
		got := e.EnvironmentsByPhase()
		return got["Running"] >= 1, fmt.Sprint(got)
	})
}
