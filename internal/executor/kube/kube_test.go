package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/executortest"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/test/kubetest"
)

// fixture is one restricted namespace with a runner ServiceAccount bound
// to exactly the Role a runner gets (kubetest.PodRunnerRules), never the
// admin's rights.
type fixture struct {
	c          *kubetest.Cluster
	ns         string
	rest       *rest.Config
	kubeconfig string
	agent      string
	// runtimeClass is the job pods' RuntimeClass:
	// $KNOTLESS_TEST_RUNTIME_CLASS (make test-gvisor: gvisor), checked by
	// kubetest; "" for the node's default runtime.
	runtimeClass string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	c := kubetest.Connect(t)
	rc := c.TestRuntimeClass(t)
	ns := c.RestrictedNamespace(t)
	path, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	return &fixture{c: c, ns: ns, rest: cfg, kubeconfig: path, agent: agenttest.Binary(t), runtimeClass: rc}
}

// config is the executor configuration tests start from: small pods of
// the job base image, as runner "test", of the fixture's RuntimeClass.
// Under a RuntimeClass (the gVisor suite) job pods ask for no user
// namespace: runsc refuses them, and --user-namespace auto would learn
// that anew in each test's executor, a failed sandbox each
// (TestKube_UserNamespaceRefusedByTheRuntimeIsDroppedUnderAutoAndAnErrorUnderRequired
// pins that path).
func (f *fixture) config() kube.Config {
	cfg := kube.Config{Config: agentenv.Config{Runner: "test", Job: executor.Job{Image: kubetest.JobBaseImage, CPUs: "200m", Memory: 128 << 20}, Agent: f.agent},
		Rest: f.rest, Namespace: f.ns, Disk: 256 << 20, PullPolicy: "Never", RuntimeClass: f.runtimeClass}
	if f.runtimeClass != "" {
		cfg.UserNamespace = kube.UserNamespaceOff
	}
	return cfg
}

func (f *fixture) executor(t testing.TB, cfg kube.Config) *kube.Executor {
	t.Helper()
	e, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// podOf is the pod name a session's handle records.
func podOf(t testing.TB, s executor.Session) string {
	t.Helper()
	var d struct {
		Pod string `json:"pod"`
	}
	if err := json.Unmarshal(s.Handle().Data, &d); err != nil || d.Pod == "" {
		t.Fatalf("session handle %s names no pod", s.Handle().Data)
	}
	return d.Pod
}

// podExec runs a shell script in the pod as the cluster's admin (the
// test's view, not the runner's).
func (f *fixture) podExec(ctx context.Context, pod, script string) ([]byte, error) {
	out, stderr, code, err := kubetest.Exec(ctx, f.c.Config, f.ns, pod, kube.Container, []string{"/bin/sh", "-c", script}, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, stderr)
	}
	return out, err
}

// procs lists the pod's processes, PIDs as its steps see them.
func (f *fixture) procs(pod string) func() ([]executortest.Proc, error) {
	return func() ([]executortest.Proc, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := f.podExec(ctx, pod, executortest.ProcsScript)
		if err != nil {
			// A pod that is gone (or ending) has no process left.
			p, gerr := f.c.Client.CoreV1().Pods(f.ns).Get(ctx, pod, metav1.GetOptions{})
			if apierrors.IsNotFound(gerr) || (gerr == nil && (p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)) {
				return []executortest.Proc{}, nil
			}
			return nil, err
		}
		return executortest.ParseProcs(out), nil
	}
}

// gate is a named pipe in the pod's /tmp: the step blocks reading it until
// the test, through its own exec, writes and closes it.
func (f *fixture) gate(pod string) func(t *testing.T) executortest.Gate {
	return func(t *testing.T) executortest.Gate {
		path := fmt.Sprintf("/tmp/.gate-%d", time.Now().UnixNano())
		mk := `f=` + path + `; [ -p $f ] || mkfifo $f 2>/dev/null || [ -p $f ]; `
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
				if _, err := f.podExec(ctx, pod, mk+`echo > $f`); err != nil {
					t.Fatalf("open gate %s: %v", path, err)
				}
			},
		}
	}
}

// leftovers lists the pods of run id that still exist.
func (f *fixture) leftovers(t *testing.T, id string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := f.c.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: agentenv.LabelRun + "=" + id})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range list.Items {
		left = append(left, fmt.Sprintf("pod %s (%s)", p.Name, p.Status.Phase))
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
			pod := podOf(t, s)
			return executortest.Env{Procs: f.procs(pod), NewGate: f.gate(pod)}
		},
		Leftovers: f.leftovers,
	}
}

// TestKube runs the executors' shared suite against job pods of the local
// cluster, as a runner's ServiceAccount.
func TestKube(t *testing.T) {
	f := newFixture(t)
	executortest.Run(t, f.harness())
}
