package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// kubeRunner is a restricted namespace of the local cluster with a runner
// ServiceAccount bound to exactly the runner's Role, and the knotless-run
// flags that run job pods there with it.
type kubeRunner struct {
	c          *kubetest.Cluster
	ns         string
	kubeconfig string // the runner ServiceAccount's
	rest       *rest.Config
	args       []string
}

func newKubeRunner(t testing.TB) *kubeRunner {
	t.Helper()
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	path, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	return &kubeRunner{c: c, ns: ns, kubeconfig: path, rest: cfg, args: []string{
		"--executor", "kube", "--kubeconfig", path, "--namespace", ns,
		"--image", kubetest.JobBaseImage, "--cpus", "200m", "--memory", "128Mi", "--disk", "256Mi",
	}}
}

// pods lists the job pods of runner name in the namespace.
func (k *kubeRunner) pods(t testing.TB, runner string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := k.c.Client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: agentenv.LabelRunner + "=" + runner})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, fmt.Sprintf("%s (%s)", p.Name, p.Status.Phase))
	}
	return names
}

// A workflow of several steps runs in a job pod through server, runner and
// CLI: the checkout arrives as a self-contained repository (no
// alternates path of the runner's host), files written by one step are
// there for the next, outputs downloaded with the CLI match byte for byte, a secret reaches its step byte-exact and is masked
// in the log, and the pod is gone after the run.
func TestE2E_KubeMultiStepRunWithCheckoutSucceeds(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	const secret = "s3cr3t-$HOME-'quoted'\\back=slash-é"
	w.cliOK(secret+"\n", "secret", "set", "TOKEN", "--repo", w.repo)
	rid := w.registerRunner("kr1")
	runner := w.startRunner(rid, k.args...)
	data := make([]byte, 2<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(data)
	run := w.pushOne(map[string]string{
		"hello.txt": "hello from the checkout\n",
		"data.bin":  string(data),
		".knotless/workflows/ci.yml": `on:
  push: {}
secrets: [TOKEN]
outputs: [out/]
steps:
  - name: checkout
    run: |
      cat hello.txt
      test -d .git && test ! -e .git/objects/info/alternates && echo "self-contained .git"
      test "$(pwd)" = "$KNOTLESS_WORKSPACE" && echo "in the workspace"
      mkdir -p out/sub && echo built > out/artifact && cp data.bin out/sub/ && ln -s artifact out/link
  - name: next
    run: cat out/artifact; id -u
  - name: secret
    secrets: [TOKEN]
    run: |
      printf '%s' "$TOKEN" | od -An -tx1 | tr -d ' \n'; echo
      echo "masked: $TOKEN"
`,
	})
	final := w.waitFinal(run.ID, 3*time.Minute)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; runner log:\n%s\nsetup log:\n%s", describe(final), runner.output(), w.stepLog(run.ID, api.SetupStep))
	}
	setup := w.stepLog(run.ID, api.SetupStep)
	for _, want := range []string{"kube executor: pod " + k.ns + "/knotless-run-", "read-only root file system"} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup log lacks %q:\n%s", want, setup)
		}
	}
	if got := w.stepLog(run.ID, 1); got != "hello from the checkout\nself-contained .git\nin the workspace\n" {
		t.Errorf("step 1 log %q", got)
	}
	if got := w.stepLog(run.ID, 2); got != "built\n1000\n" {
		t.Errorf("step 2 log %q, want the file step 1 wrote and uid 1000", got)
	}
	var hex strings.Builder
	for _, b := range []byte(secret) {
		fmt.Fprintf(&hex, "%02x", b)
	}
	log3 := w.stepLog(run.ID, 3)
	if !strings.Contains(log3, hex.String()+"\n") {
		t.Errorf("the secret did not reach the step byte-exact: log %q, want hex %s", log3, hex.String())
	}
	if strings.Contains(log3, secret) || !strings.Contains(log3, "masked: ***") {
		t.Errorf("the secret is not masked in the log: %q", log3)
	}
	if final.Outputs == nil {
		t.Fatalf("the run stored no outputs; setup log:\n%s", setup)
	}
	dst := filepath.Join(w.root, "got")
	w.cliOK("", "run", "outputs", itoa(run.ID), "-o", dst)
	if b, err := os.ReadFile(filepath.Join(dst, "out", "sub", "data.bin")); err != nil || !bytes.Equal(b, data) {
		t.Errorf("downloaded out/sub/data.bin differs from the committed data.bin (err %v, %d bytes)", err, len(b))
	}
	if b, err := os.ReadFile(filepath.Join(dst, "out", "artifact")); err != nil || string(b) != "built\n" {
		t.Errorf("downloaded out/artifact: %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "out", "link")); err != nil || l != "artifact" {
		t.Errorf("downloaded out/link: %q, %v; want a symbolic link to artifact", l, err)
	}
	testwait.Until(t, 30*time.Second, "the job pod to be gone", func() (bool, string) {
		left := k.pods(t, "kr1")
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// A runner SIGKILLed while its job pod runs a step leaves the pod behind;
// once the run is cancelled on the server, the runner started again on the
// same state and work directory deletes the pod at its start (Sweep):
// nothing of the dead process stays in the cluster.
func TestE2E_KubeRunnerKilledThenRestartedLeavesNoPod(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("kr2")
	first := w.startRunner(rid, k.args...)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: long
    run: echo started; sleep 600
`})
	w.waitRun(run.ID, 2*time.Minute, "the step to start", func(r api.Run) bool {
		return strings.Contains(w.stepLog(run.ID, 1), "started")
	})
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	if left := k.pods(t, "kr2"); len(left) != 1 {
		t.Fatalf("after SIGKILL the runner's pods are %v, want the run's one pod still there", left)
	}
	w.cliOK("", "run", "cancel", fmt.Sprint(run.ID))
	w.waitFinal(run.ID, time.Minute)
	second := w.startRunner(rid, k.args...)
	testwait.Until(t, time.Minute, "the restarted runner to delete the dead runner's job pod", func() (bool, string) {
		left := k.pods(t, "kr2")
		return len(left) == 0, strings.Join(left, ", ")
	})
	second.signal(t, syscall.SIGINT)
	second.wait(t, 30*time.Second)
}

// A runner SIGKILLed while its job pod runs a step, and started again on
// the same state and work directory, takes the run over: the step in the
// pod was never interrupted (it says its PID once), its log is whole and
// in order, the next step runs in the same pod, and the run succeeds.
func TestE2E_KubeRunnerKilledMidStepTakesTheRunOverInTheSamePod(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("kr3")
	first := w.startRunner(rid, k.args...)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: count
    run: |
      echo "step pid $$ on $(hostname)"
      i=1
      while [ $i -le 20 ]; do echo "line $i"; i=$((i+1)); sleep 0.5; done
      echo done
  - name: after
    run: echo "second step on $(hostname)"
`})
	w.waitRun(run.ID, 2*time.Minute, "the step to print", func(r api.Run) bool {
		return strings.Contains(w.stepLog(run.ID, 1), "line 2\n")
	})
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	second := w.startRunner(rid, k.args...)
	final := w.waitFinal(run.ID, 2*time.Minute)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; runner log:\n%s\nsetup log:\n%s", describe(final), second.output(), w.stepLog(run.ID, api.SetupStep))
	}
	log := withoutMarkers(t, w.stepLog(run.ID, 1), 1)
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	if len(lines) != 22 || !strings.HasPrefix(lines[0], "step pid ") || lines[21] != "done" {
		t.Fatalf("step log:\n%s\nwant one pid line, lines 1..20, done", log)
	}
	for i := 1; i <= 20; i++ {
		if lines[i] != fmt.Sprintf("line %d", i) {
			t.Fatalf("step log line %d is %q: lost, repeated or out of order\n%s", i+1, lines[i], log)
		}
	}
	host := strings.TrimPrefix(lines[0][strings.Index(lines[0], " on ")+4:], "")
	if got := w.stepLog(run.ID, 2); got != "second step on "+host+"\n" {
		t.Errorf("step 2 log %q, want it in the same pod %s", got, host)
	}
	testwait.Until(t, 30*time.Second, "the job pod to be gone", func() (bool, string) {
		left := k.pods(t, "kr3")
		return len(left) == 0, strings.Join(left, ", ")
	})
}
