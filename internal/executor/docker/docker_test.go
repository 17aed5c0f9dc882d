package docker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/internal/executor/executortest"
	"knotless.dev/knotless/test/dockertest"
)

// fixture is a real engine (dockertest.Connect), the busybox job image and
// the agent built for tests; each test gets a runner name of its own, so
// its containers and network are its own.
type fixture struct {
	eng    *dockertest.Engine
	agent  string
	runner string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	eng := dockertest.Connect(t)
	eng.EnsureJobImage(t)
	f := &fixture{eng: eng, agent: agenttest.Binary(t), runner: fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f.eng.RemoveLabelled(ctx, agentenv.LabelRunner+"="+f.runner)
		if e, err := docker.New(docker.Config{Config: agentenv.Config{Runner: f.runner, Agent: f.agent}, Client: f.eng.Client}); err == nil {
			if err := e.RemoveNetwork(ctx); err != nil {
				t.Errorf("remove the test runner's network: %v", err)
			}
		}
	})
	return f
}

// config is what tests start from: small containers of the job image.
func (f *fixture) config() docker.Config {
	return docker.Config{Config: agentenv.Config{Runner: f.runner, Job: executor.Job{Image: dockertest.JobImage, CPUs: "1", Memory: 128 << 20}, Agent: f.agent}, Client: f.eng.Client, Pids: 256}
}

func (f *fixture) executor(t testing.TB, cfg docker.Config) *docker.Executor {
	t.Helper()
	e, err := docker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// containerOf is the container ID a session's handle records.
func containerOf(t testing.TB, s executor.Session) string {
	t.Helper()
	var d struct {
		Container string `json:"container"`
	}
	if err := json.Unmarshal(s.Handle().Data, &d); err != nil || d.Container == "" {
		t.Fatalf("session handle %s names no container", s.Handle().Data)
	}
	return d.Container
}

// sh runs a shell script in the container as the test (root).
func (f *fixture) sh(ctx context.Context, id, script string) ([]byte, error) {
	out, stderr, code, err := f.eng.Exec(ctx, id, "0:0", []string{"/bin/sh", "-c", script}, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, stderr)
	}
	return out, err
}

// procs lists the container's processes, PIDs as its steps see them.
func (f *fixture) procs(id string) func() ([]executortest.Proc, error) {
	return func() ([]executortest.Proc, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := f.sh(ctx, id, executortest.ProcsScript)
		if err != nil {
			st, ierr := f.eng.Client.ContainerInspect(ctx, id)
			if ierr != nil || st.State == nil || !st.State.Running {
				return []executortest.Proc{}, nil // gone: no process left
			}
			return nil, err
		}
		return executortest.ParseProcs(out), nil
	}
}

// gate is a named pipe in the container's /tmp.
func (f *fixture) gate(id string) func(t *testing.T) executortest.Gate {
	return func(t *testing.T) executortest.Gate {
		path := fmt.Sprintf("/tmp/.gate-%d", time.Now().UnixNano())
		mk := `f=` + path + `; [ -p $f ] || mkfifo -m 666 $f 2>/dev/null || [ -p $f ]; `
		opened := false
		return executortest.Gate{
			Wait: mk + `cat $f >/dev/null`,
			Open: func(t *testing.T) {
				t.Helper()
				if opened {
					return
				}
				opened = true
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if _, err := f.sh(ctx, id, mk+`echo > $f`); err != nil {
					t.Fatalf("open gate %s: %v", path, err)
				}
			},
		}
	}
}

// leftovers lists the containers of run id that still exist.
func (f *fixture) leftovers(t *testing.T, id string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := f.eng.Containers(ctx, agentenv.LabelRunner+"="+f.runner, agentenv.LabelRun+"="+id)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, c := range list {
		left = append(left, fmt.Sprintf("container %s (%s)", c.ID[:12], c.State))
	}
	return left
}

func (f *fixture) harness() executortest.Harness {
	return executortest.Harness{
		Executor: func(t *testing.T) func() executor.Executor {
			cfg := f.config()
			return func() executor.Executor { return f.executor(t, cfg) }
		},
		Spec: func(t *testing.T, id string) executor.Spec {
			return executor.Spec{ID: id, Workspace: t.TempDir(), Timeout: 10 * time.Minute}
		},
		Env: func(t *testing.T, s executor.Session) executortest.Env {
			id := containerOf(t, s)
			return executortest.Env{Procs: f.procs(id), NewGate: f.gate(id)}
		},
		Leftovers: f.leftovers,
	}
}

// TestDocker runs the executors' shared suite against containers of a real
// engine.
func TestDocker(t *testing.T) {
	f := newFixture(t)
	executortest.Run(t, f.harness())
}
