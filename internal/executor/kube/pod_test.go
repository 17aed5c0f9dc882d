package kube

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// update rewrites the golden pods of TestPod_* from the code:
// go test -run 'TestPod_' -update ./internal/executor/kube, then review
// the diff of testdata/.
var update = flag.Bool("update", false, "rewrite testdata/pod-*.json from the code")

// TestPod_JobPodIsTheGoldenPod builds the job pod of each run (jobPod:
// what Make creates, no API server) and compares it, whole, as JSON, with
// testdata/pod-<name>.json: every field of a job pod (hardening,
// resources, labels, deadline, PID 1's command, sidecars) changes only as
// a reviewed diff of those files. Nothing in the pod is random or of the
// clock but the agent's --deadline, which comes from serve (fixed here);
// the API server adds the name's random suffix to its GenerateName.
func TestPod_JobPodIsTheGoldenPod(t *testing.T) {
	deadline := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	serve := func(run string) agent.Serve {
		return agent.Serve{Run: run, Deadline: deadline, Heartbeat: 5 * time.Second, DeadAfter: 20 * time.Second}
	}
	base := Config{
		Config: agentenv.Config{Runner: "runner-1", Agent: "/usr/lib/knotless/knotless-agent",
			Job: executor.Job{Image: "localhost/knotless/job-base:1"}},
		Rest: &rest.Config{Host: "https://kube.invalid"}, Namespace: "ci",
	}
	full := base
	full.Job = executor.Job{Image: "localhost/knotless/job-base:1", CPUs: "4", Memory: 8 << 30, RunAs: executor.RunAs{UID: 1001, GID: 1002}}
	full.Disk = 20 << 30
	full.RuntimeClass = "gvisor"
	full.NodeSelector = map[string]string{"pool": "ci"}
	full.Tolerations = []corev1.Toleration{{Key: "ci", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	full.PullSecrets = []string{"registry"}
	full.PullPolicy = corev1.PullIfNotPresent
	full.Owner = &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "knotless-runner-5d9f", UID: "0b6c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d", Controller: ptr.To(true)}
	full.Pids = 512
	builds := base
	builds.BuildsNamespace, builds.BuilderImage = "ci-builds", "localhost/knotless/builder:1"

	fullSpec := executor.Spec{
		ID: "run-42", Image: "golang:1.23", Arch: "arm64", CPUs: "2", MemoryBytes: 2 << 30, DiskBytes: 5 << 30,
		Timeout: 30 * time.Minute, Workspace: "/var/lib/knotless/ws/run-42",
		Labels: map[string]string{"knotless.dev/repo": "alice/app", "Not A Key!": "dropped", agentenv.LabelRun: "not-the-run"},
		Services: []executor.Service{{
			Name: "postgres", Image: "postgres:16", Env: map[string]string{"POSTGRES_DB": "app"},
			Command: []string{"postgres", "-c", "fsync=off"}, Secrets: map[string]string{"POSTGRES_PASSWORD": "s3cret"},
			Ports: []int{5432}, Ready: "pg_isready", CPUs: "1", MemoryBytes: 1 << 30, DiskBytes: 1 << 30,
		}},
	}
	for _, c := range []struct {
		name   string
		cfg    Config
		builds bool
		spec   executor.Spec
		warm   bool
		userns bool
	}{
		// The defaults: a run that asks for nothing, no user namespace.
		{name: "minimal", cfg: base, spec: executor.Spec{ID: "run-1"}},
		// Every field a Config or a workflow can set, a service with a
		// secret (its value must never be in the pod), a user namespace.
		{name: "full", cfg: full, spec: fullSpec, userns: true},
		// A warm pod: no run's labels, the long warmDeadline.
		{name: "warm", cfg: base, spec: executor.Spec{ID: "warm-0123456789"}, warm: true},
		// A container-builds run: the builds namespace, the builder
		// sidecar, a user namespace always.
		{name: "builds", cfg: builds, builds: true, spec: executor.Spec{ID: "run-7", ContainerBuilds: true}, userns: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if c.builds {
				e = e.builds
			}
			plan, err := e.jobPod(c.spec, serve(c.spec.ID), c.warm, c.userns)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(plan.pod, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			if bytes.Contains(got, []byte("s3cret")) {
				t.Errorf("a service's secret value is in the pod")
			}
			golden := filepath.Join("testdata", "pod-"+c.name+".json")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run TestPod_ -update writes it)", err)
			}
			if d := lineDiff(string(want), string(got)); d != "" {
				t.Errorf("the %s job pod differs from %s (if the change is meant: go test -run TestPod_ -update, and review the diff):\n%s", c.name, golden, d)
			}
		})
	}
}

// lineDiff says where got's lines first differ from want's ("" when
// equal), with a few lines of each from there.
func lineDiff(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	show := func(l []string) string { return strings.Join(l[i:min(len(l), i+8)], "\n") }
	return fmt.Sprintf("from line %d\nwant:\n%s\ngot:\n%s", i+1, show(w), show(g))
}
