package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/dockertest"
	"knotless.dev/knotless/test/kubetest"
)

// A matrix over two images on kube: each run's job pod runs its own
// image (job-ownpath has `hello` on its PATH, job-base has none), and
// each run is named by its value.
func TestE2E_KubeMatrixOfTwoImagesRunsEachInItsImage(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	matrixOfTwoImages(t, k.args, kubetest.JobBaseImage, kubetest.JobOwnPathImage)
}

// The same on docker: each run's job container runs its own image.
func TestE2E_DockerMatrixOfTwoImagesRunsEachInItsImage(t *testing.T) {
	t.Parallel()
	d := newDockerRunner(t)
	matrixOfTwoImages(t, d.args, dockertest.JobImage, dockertest.OwnPathImage)
}

// matrixOfTwoImages pushes a workflow whose matrix is its image, base and
// ownPath (an image with `hello` on its own PATH), to a runner with args,
// and checks that each run ran in its image.
func matrixOfTwoImages(t *testing.T, args []string, base, ownPath string) {
	w := newWorld(t, 30*time.Second)
	runner := w.startRunner(w.registerRunner("images"), append(args, "--capacity", "2")...)
	runs := byWorkflow(w.push(map[string]string{".knotless/workflows/images.yml": `on: {push: {}}
matrix:
  image: ["` + base + `", "` + ownPath + `"]
image: "{{ matrix.image }}"
steps:
  - run: if command -v hello >/dev/null; then hello; else echo "no hello in {{ matrix.image }}"; fi
`}, 2))
	for image, want := range map[string]string{
		base:    "no hello in " + base + "\n",
		ownPath: "hello from the image's own PATH\n",
	} {
		r, ok := runs["images ("+image+")"]
		if !ok {
			t.Fatalf("no run named by image %s: %v", image, runs)
		}
		f := w.waitFinal(r.ID, 4*time.Minute)
		if f.State != api.StateSucceeded {
			t.Fatalf("%s; runner log:\n%s\nsetup log:\n%s", describe(f), runner.output(), w.stepLog(r.ID, api.SetupStep))
		}
		if got := w.stepLog(r.ID, 1); got != want {
			t.Errorf("run in %s printed %q, want %q", image, got, want)
		}
		if setup := w.stepLog(r.ID, api.SetupStep); !strings.Contains(setup, image) {
			t.Errorf("the setup log of the run in %s does not name its image:\n%s", image, setup)
		}
	}
}

// A job pod evicted (the Eviction API, as the cluster's admin) while its
// step runs ends the run errored/evicted; with retry: on evicted, the run
// is retried once as a new attempt, whose new pod runs the step to
// success; the first attempt's pod is gone by then.
func TestE2E_KubeEvictedJobPodIsRetriedOnceAndTheSecondAttemptSucceeds(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	runner := w.startRunner(w.registerRunner("ke"), k.args...)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on: {push: {}}
retry: {max: 1, when: [evicted]}
steps:
  - run: |
      if [ "$KNOTLESS_ATTEMPT" = 1 ]; then echo "attempt 1 waits to be evicted"; sleep 600; fi
      echo "attempt $KNOTLESS_ATTEMPT ok"
`})
	testwait.UntilEvery(t, 4*time.Minute, 500*time.Millisecond, "attempt 1's step to run", func() (bool, string) {
		r, err := w.tryRun(run.ID)
		if err == nil && api.IsFinal(r.State) {
			t.Fatalf("%s before it was evicted; setup log:\n%s", describe(r), w.stepLog(run.ID, api.SetupStep))
		}
		log := w.stepLog(run.ID, 1)
		return strings.Contains(log, "waits to be evicted"), log
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := k.c.Client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=run-%d", agentenv.LabelRun, run.ID)})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the job pod of run %d: %v, %d pods", run.ID, err, len(pods.Items))
	}
	pod := pods.Items[0].Name
	if err := k.c.Client.CoreV1().Pods(k.ns).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod, Namespace: k.ns},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)},
	}); err != nil {
		t.Fatalf("evict %s: %v", pod, err)
	}
	first := w.waitFinal(run.ID, 2*time.Minute)
	if first.State != api.StateErrored || first.Reason != api.ReasonEvicted || first.RetriedBy == 0 {
		t.Fatalf("%s retried by %d; want errored/evicted and a retry; runner log:\n%s", describe(first), first.RetriedBy, runner.output())
	}
	second := w.waitFinal(first.RetriedBy, 4*time.Minute)
	if second.State != api.StateSucceeded || second.Attempt != 2 || second.RetryOf != run.ID {
		t.Fatalf("retry: %s attempt %d of %d; setup log:\n%s", describe(second), second.Attempt, second.RetryOf, w.stepLog(second.ID, api.SetupStep))
	}
	if got := w.stepLog(second.ID, 1); got != "attempt 2 ok\n" {
		t.Errorf("attempt 2's log %q", got)
	}
	// The runner reports a run's end once its pod is deleted and gone;
	// only then may the retry be claimed.
	ended, claimed := logLine(runner.output(), run.ID, `msg="run finished"`), logLine(runner.output(), second.ID, `msg="claimed run"`)
	if ended < 0 || claimed < 0 || claimed < ended {
		t.Errorf("runner log: attempt 1 finished at line %d, attempt 2 claimed at line %d; want the claim after the end:\n%s", ended, claimed, runner.output())
	}
	if _, err := k.c.Client.CoreV1().Pods(k.ns).Get(ctx, pod, metav1.GetOptions{}); err == nil {
		t.Errorf("the evicted pod %s still exists after the retry", pod)
	}
	if second.RetriedBy != 0 || len(w.runs(run.Pipeline)) != 2 {
		t.Errorf("more than one retry: %d runs in the pipeline", len(w.runs(run.Pipeline)))
	}
}

// logLine is the index of the first line of a runner's log about run id
// that holds what; -1 when none does.
func logLine(log string, id int64, what string) int {
	tag := fmt.Sprintf(" run=%d ", id)
	for i, line := range strings.Split(log, "\n") {
		if strings.Contains(line+" ", tag) && strings.Contains(line, what) {
			return i
		}
	}
	return -1
}
