package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testwait"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/test/dockertest"
)

// dockerRunner is a real Docker engine with the job image, and the
// knotless-run flags that run job containers there.
type dockerRunner struct {
	eng  *dockertest.Engine
	args []string
}

func newDockerRunner(t testing.TB) *dockerRunner {
	t.Helper()
	eng := dockertest.Connect(t)
	eng.EnsureJobImage(t)
	return &dockerRunner{eng: eng, args: []string{
		"--executor", "docker", "--image", dockertest.JobImage, "--cpus", "1", "--memory", "128Mi", "--pids", "256",
	}}
}

// containers lists the job containers of runner name, and removes them
// and the runner's network when the test ends.
func (d *dockerRunner) containers(t testing.TB, runner string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := d.eng.Containers(ctx, agentenv.LabelRunner+"="+runner)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list {
		names = append(names, fmt.Sprintf("%s (%s)", strings.Join(c.Names, ","), c.State))
	}
	return names
}

func (d *dockerRunner) cleanup(t testing.TB, runner string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d.eng.RemoveLabelled(ctx, agentenv.LabelRunner+"="+runner)
		if e, err := docker.New(docker.Config{Config: agentenv.Config{Runner: runner, Agent: "/bin/true"}, Client: d.eng.Client}); err == nil {
			_ = e.RemoveNetwork(ctx)
		}
	})
}

// A workflow of several steps runs in one job container through server,
// runner and CLI: the checkout is the runner's directory bind-mounted
// (files a step writes are there for the next), the steps run as 1000, a
// secret reaches its step byte-exact and is masked in the log, outputs
// are downloaded whole, and the container is gone after the run.
func TestE2E_DockerMultiStepRunWithCheckoutSucceeds(t *testing.T) {
	t.Parallel()
	d := newDockerRunner(t)
	w := newWorld(t, 30*time.Second)
	const secret = "s3cr3t-$HOME-'quoted'\\back=slash-é"
	w.cliOK(secret+"\n", "secret", "set", "TOKEN", "--repo", w.repo)
	rid := w.registerRunner("dr1")
	d.cleanup(t, "dr1")
	runner := w.startRunner(rid, d.args...)
	run := w.pushOne(map[string]string{
		"hello.txt": "hello from the checkout\n",
		".knotless/workflows/ci.yml": `on:
  push: {}
secrets: [TOKEN]
outputs: [out/]
steps:
  - name: checkout
    run: |
      cat hello.txt
      test "$(pwd)" = "$KNOTLESS_WORKSPACE" && echo "in the workspace"
      mkdir -p out && echo built > out/artifact
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
	for _, want := range []string{"docker executor: container knotless-dr1-", "read-only root file system"} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup log lacks %q:\n%s", want, setup)
		}
	}
	if got := w.stepLog(run.ID, 1); got != "hello from the checkout\nin the workspace\n" {
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
	dst := filepath.Join(w.root, "got")
	w.cliOK("", "run", "outputs", itoa(run.ID), "-o", dst)
	if b, err := os.ReadFile(filepath.Join(dst, "out", "artifact")); err != nil || string(b) != "built\n" {
		t.Errorf("downloaded out/artifact: %q, %v", b, err)
	}
	testwait.Until(t, 30*time.Second, "the job container to be gone", func() (bool, string) {
		left := d.containers(t, "dr1")
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// A runner SIGKILLed while its job container runs a step leaves the
// container behind; once the run is cancelled on the server, the runner
// started again on the same state and work directory removes it at its
// start (Sweep by label): nothing of the dead process stays on the engine.
func TestE2E_DockerRunnerKilledThenRestartedLeavesNoContainer(t *testing.T) {
	t.Parallel()
	d := newDockerRunner(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("dr2")
	d.cleanup(t, "dr2")
	first := w.startRunner(rid, d.args...)
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
	if left := d.containers(t, "dr2"); len(left) != 1 {
		t.Fatalf("after SIGKILL the runner's containers are %v, want the run's one container still there", left)
	}
	w.cliOK("", "run", "cancel", fmt.Sprint(run.ID))
	w.waitFinal(run.ID, time.Minute)
	second := w.startRunner(rid, d.args...)
	testwait.Until(t, time.Minute, "the restarted runner to remove the dead runner's job container", func() (bool, string) {
		left := d.containers(t, "dr2")
		return len(left) == 0, strings.Join(left, ", ")
	})
	second.signal(t, syscall.SIGINT)
	second.wait(t, 30*time.Second)
}

// A runner SIGKILLed while its job container runs a step, and started
// again on the same state and work directory, takes the run over: the
// step was never interrupted, its log is whole and in order, the next
// step runs in the same container, and the run succeeds.
func TestE2E_DockerRunnerKilledMidStepTakesTheRunOverInTheSameContainer(t *testing.T) {
	t.Parallel()
	d := newDockerRunner(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("dr3")
	d.cleanup(t, "dr3")
	first := w.startRunner(rid, d.args...)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: count
    run: |
      echo "step on $(hostname)"
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
	second := w.startRunner(rid, d.args...)
	final := w.waitFinal(run.ID, 2*time.Minute)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; runner log:\n%s\nsetup log:\n%s", describe(final), second.output(), w.stepLog(run.ID, api.SetupStep))
	}
	log := withoutMarkers(t, w.stepLog(run.ID, 1), 1)
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	if len(lines) != 22 || !strings.HasPrefix(lines[0], "step on ") || lines[21] != "done" {
		t.Fatalf("step log:\n%s\nwant the host line, lines 1..20, done", log)
	}
	for i := 1; i <= 20; i++ {
		if lines[i] != fmt.Sprintf("line %d", i) {
			t.Fatalf("step log line %d is %q: lost, repeated or out of order\n%s", i+1, lines[i], log)
		}
	}
	host := strings.TrimPrefix(lines[0], "step on ")
	if got := w.stepLog(run.ID, 2); got != "second step on "+host+"\n" {
		t.Errorf("step 2 log %q, want it in the same container %s", got, host)
	}
	testwait.Until(t, 30*time.Second, "the job container to be gone", func() (bool, string) {
		left := d.containers(t, "dr3")
		return len(left) == 0, strings.Join(left, ", ")
	})
}
