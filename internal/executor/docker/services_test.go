package docker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/test/dockertest"
)

// servicesConfig is config with room for PostgreSQL: its /tmp is a
// tmpfs charged to its memory.
func (f *fixture) servicesConfig() docker.Config {
	cfg := f.config()
	cfg.Memory = 1 << 30
	cfg.Pids = 0
	return cfg
}

// TestDocker_PostgresServiceAnswersTheStep: a workflow's PostgreSQL
// service (its own image, a password it gets as a secret) is ready by its
// port before the first step, and the step's psql reaches it at
// 127.0.0.1:5432 with that password; the secret's value is nowhere in
// either container's config; the service container is hardened as the
// job's; its log is readable; and it goes with the session.
func TestDocker_PostgresServiceAnswersTheStep(t *testing.T) {
	f := newFixture(t)
	img := f.eng.EnsurePostgresImage(t)
	e := f.executor(t, f.servicesConfig())
	spec, log := f.spec(t, runID("pg"))
	spec.Image = img
	const password = "pw-canary-7Q2x'quoted"
	spec.Services = []executor.Service{{
		Name: "db", Image: img, Command: []string{"pg-service"},
		Secrets: map[string]string{"POSTGRES_PASSWORD": password},
		Env:     map[string]string{"PGPORT": "5432"},
		Ports:   []int{5432}, Ready: "pg_isready -h 127.0.0.1 -p 5432",
		ReadyTimeout: 2 * time.Minute, MemoryBytes: 256 << 20,
	}}
	s := f.prepare(t, e, spec)
	if !strings.Contains(log.String(), "service db (image "+img+") ready after") {
		t.Errorf("the setup log does not say the service is ready:\n%s", log)
	}
	res, out, err := runStep(t, s, executor.Step{ID: "1",
		Script:  "psql -h 127.0.0.1 -U postgres -tAc 'select 40+2'\n",
		Secrets: map[string]string{"PGPASSWORD": password}}, time.Minute)
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(out), "42") {
		t.Fatalf("step: %+v, %v\n%s", res, err, out)
	}
	// A wrong password is refused: the service really has the secret.
	res, out, _ = runStep(t, s, executor.Step{ID: "2",
		Script:  "psql -h 127.0.0.1 -U postgres -tAc 'select 1'\n",
		Secrets: map[string]string{"PGPASSWORD": "wrong"}}, time.Minute)
	if res.ExitCode == 0 || !strings.Contains(string(out), "password authentication failed") {
		t.Errorf("a wrong password: %+v\n%s", res, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := f.eng.Containers(ctx, agentenv.LabelRunner+"="+f.runner, docker.LabelService+"=db")
	if err != nil || len(list) != 1 {
		t.Fatalf("service containers: %v, %v", list, err)
	}
	svc, err := f.eng.Client.ContainerInspect(ctx, list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	job, err := f.eng.Client.ContainerInspect(ctx, containerOf(t, s))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []container.InspectResponse{svc, job} {
		b, _ := json.Marshal(c)
		if strings.Contains(string(b), "canary") {
			t.Errorf("container %s's config holds the secret's value", c.Name)
		}
	}
	hc := svc.HostConfig
	switch {
	case !hc.ReadonlyRootfs, len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL", hc.Privileged,
		!strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges"),
		string(hc.NetworkMode) != "container:"+job.ID, hc.Memory != 256<<20, hc.MemorySwap != hc.Memory,
		svc.Config.User != job.Config.User, len(hc.Binds) != 0, len(hc.Mounts) != 0:
		t.Errorf("service container not hardened as the job's: user %q (job %q), host config %+v", svc.Config.User, job.Config.User, hc)
	}
	sl, ok := s.(executor.ServiceLogger)
	if !ok {
		t.Fatal("the docker session has no service logs")
	}
	b, err := sl.ServiceLog(ctx, "db", 1<<20)
	if err != nil || !strings.Contains(string(b), "database system is ready to accept connections") {
		t.Errorf("service log: %v\n%s", err, b)
	}
	if err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if left, _ := f.eng.Containers(ctx, agentenv.LabelRunner+"="+f.runner); len(left) != 0 {
		t.Errorf("the session's cleanup left %d containers", len(left))
	}
}

// TestDocker_ServiceThatExitsBeforeReadyFailsTheRunNamingIt: a service
// whose command exits fails the Prepare at once (reason service, its
// name and exit code), not after its ready-timeout, with its log in the
// setup log.
func TestDocker_ServiceThatExitsBeforeReadyFailsTheRunNamingIt(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, log := f.spec(t, runID("svcexit"))
	spec.Services = []executor.Service{{Name: "broken", Image: dockertest.JobImage,
		Command: []string{"/bin/sh", "-c", "echo the-service-said-this; exit 7"}, Ports: []int{6000}, ReadyTimeout: 5 * time.Minute}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := e.Prepare(ctx, spec)
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonService || !strings.Contains(fault.Message, "service broken") || !strings.Contains(fault.Message, "code 7") {
		t.Fatalf("Prepare: %v, want a service fault naming broken and its exit code", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the fault came after %s: the exit was not noticed", d)
	}
	if !strings.Contains(log.String(), "the-service-said-this") {
		t.Errorf("the setup log lacks the service's log:\n%s", log)
	}
	if left, _ := f.eng.Containers(ctx, agentenv.LabelRunner+"="+f.runner); len(left) != 0 {
		t.Errorf("a failed Prepare left %d containers", len(left))
	}
}

// TestDocker_UnpullableServiceImageFailsNamingTheService: a service image
// that is not on the engine and cannot be pulled (no registry answers)
// ends the Prepare image-pull, naming the service and its image.
func TestDocker_UnpullableServiceImageFailsNamingTheService(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("svcpull"))
	spec.Services = []executor.Service{{Name: "cache", Image: "localhost:1/knotless/no-such-image:1"}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := e.Prepare(ctx, spec)
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonImagePull || !strings.Contains(fault.Message, "service cache") || !strings.Contains(fault.Message, "no-such-image") {
		t.Fatalf("Prepare: %v, want image-pull naming service cache", err)
	}
}

// TestDocker_ServiceThatDiesMidRunFailsTheStepNamingIt: a service that
// exits while a step runs (a fresh user's trial found such a run
// succeeded without a word) fails that step with reason service, its
// note naming the service and its exit code.
func TestDocker_ServiceThatDiesMidRunFailsTheStepNamingIt(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("svcdies"))
	spec.Services = []executor.Service{{Name: "flaky", Image: dockertest.JobImage, Command: []string{"/bin/sh", "-c", "sleep 2; exit 7"}}}
	s := f.prepare(t, e, spec)
	res, out, err := runStep(t, s, executor.Step{ID: "1", Script: "sleep 4; echo step-done\n"}, time.Minute)
	if err != nil || res.Reason != api.ReasonService || !strings.Contains(res.Note, "service flaky") || !strings.Contains(res.Note, "code 7") {
		t.Fatalf("step: %+v, %v\n%s; want reason service naming flaky and its exit code", res, err, out)
	}
}

// TestDocker_ServiceNotReadyInTimeSaysWhatTheProbeFound: a port nobody
// listens on ends the Prepare after ready-timeout, failed/service, with
// the probe's finding in words (not the agent's "reachable refused").
func TestDocker_ServiceNotReadyInTimeSaysWhatTheProbeFound(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("svcslow"))
	spec.Services = []executor.Service{{Name: "idle", Image: dockertest.JobImage, Command: []string{"sleep", "600"}, Ports: []int{5433}, ReadyTimeout: 3 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := e.Prepare(ctx, spec)
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonService || !strings.Contains(fault.Message, "was not ready within 3s") ||
		!strings.Contains(fault.Message, "127.0.0.1:5433: connection refused") || strings.Contains(fault.Message, "reachable") {
		t.Fatalf("Prepare: %v", err)
	}
}
