package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/dockertest"
	"knotless.dev/knotless/test/kubetest"
)

// A workflow with a PostgreSQL service (an image of its own, its password
// a repository secret) through server, runner and CLI on docker: the
// service is ready before the first step, the step's psql reaches it at
// 127.0.0.1:5432 with that password, the secret is masked wherever it
// appears, the service's log ends the setup log, and nothing is left on
// the engine.
func TestE2E_DockerPostgresServiceAnswersTheTestStep(t *testing.T) {
	t.Parallel()
	d := newDockerRunner(t)
	img := d.eng.EnsurePostgresImage(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("svc1")
	d.cleanup(t, "svc1")
	runPostgresService(t, w, rid, img, withMemory(d.args, "512Mi"))
	testwait.Until(t, 30*time.Second, "the job and service containers to be gone", func() (bool, string) {
		left := d.containers(t, "svc1")
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// The same through server, runner and CLI on kube: the service is a native
// sidecar of the job pod, and the pod is gone after the run.
func TestE2E_KubePostgresServiceAnswersTheTestStep(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("ksvc1")
	runPostgresService(t, w, rid, kubetest.JobPostgresImage, withMemory(k.args, "512Mi"))
	testwait.Until(t, time.Minute, "the job pod to be gone", func() (bool, string) {
		left := k.pods(t, "ksvc1")
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// withMemory is a runner's arguments with its --memory value set to m.
func withMemory(args []string, m string) []string {
	out := append([]string{}, args...)
	for i := range out {
		if i > 0 && out[i-1] == "--memory" {
			out[i] = m
		}
	}
	return out
}

// runPostgresService pushes a workflow whose step queries a PostgreSQL
// service of image img (its password a repository secret), runs it on
// runner rid started with args and checks the run: succeeded, the step's
// answer came from the service, the service's readiness and log are in the
// setup log, and the secret is in no log.
func runPostgresService(t *testing.T, w *world, rid *runnerID, img string, args []string) {
	t.Helper()
	const password = "pg-s3cr3t-e2e"
	w.cliOK(password+"\n", "secret", "set", "POSTGRES_PASSWORD", "--repo", w.repo)
	runner := w.startRunner(rid, args...)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
image: ` + img + `
secrets: [POSTGRES_PASSWORD]
services:
  db:
    image: ` + img + `
    command: [pg-service]
    secrets: [POSTGRES_PASSWORD]
    ports: [5432]
    ready: pg_isready -h 127.0.0.1
    resources: {memory: 256Mi}
steps:
  - name: query
    secrets: [POSTGRES_PASSWORD]
    run: PGPASSWORD="$POSTGRES_PASSWORD" psql -h 127.0.0.1 -U postgres -tAc 'select 40+2'
`})
	final := w.waitFinal(run.ID, 3*time.Minute)
	setup := w.stepLog(run.ID, api.SetupStep)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; runner log:\n%s\nsetup log:\n%s", describe(final), runner.output(), setup)
	}
	if got := w.stepLog(run.ID, 1); strings.TrimSpace(got) != "42" {
		t.Errorf("step log %q, want 42 from the service", got)
	}
	for _, want := range []string{"service db (image " + img + ") ready after", "--- service db: its log", "database system is ready to accept connections"} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup log lacks %q:\n%s", want, setup)
		}
	}
	if strings.Contains(setup, password) || strings.Contains(runner.output(), password) {
		t.Errorf("the setup log or the runner's log holds the service's secret")
	}
}

// A services workflow run with `knotless-run exec --executor shell` fails
// at once, naming the services and the executors that run them (the same
// state and reason the server path gives: failed/service), and runs no
// step.
func TestE2E_ShellExecRefusesAServicesRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".knotless", "workflows"), 0o755); err != nil {
		t.Fatal(err)
	}
	wf := "on: {push: {}}\nservices: {db: {image: " + dockertest.JobImage + "}}\nsteps: [{run: echo never-ran}]\n"
	if err := os.WriteFile(filepath.Join(dir, ".knotless", "workflows", "ci.yml"), []byte(wf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runnerBin(), "exec", ".knotless/workflows/ci.yml", "--executor", "shell")
	cmd.Dir = dir
	cmd.Env = baseEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "failed") || !strings.Contains(string(out), "service") || !strings.Contains(string(out), "docker or kube") {
		t.Fatalf("exec: %v, output:\n%s\nwant failed/service naming the executors that run services", err, out)
	}
	if strings.Contains(string(out), "never-ran\n") {
		t.Error("a step ran")
	}
}
