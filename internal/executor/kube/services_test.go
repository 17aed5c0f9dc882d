package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/test/kubetest"
)

// TestKube_PostgresServiceAnswersTheStep: a workflow's PostgreSQL
// service (its own image, a password it gets as a secret) runs as a
// native sidecar of the job pod, ready by its port and command before the
// first step; the step's psql reaches it at 127.0.0.1:5432 with that
// password (a wrong one is refused). The stored pod shows the sidecar
// hardened exactly as the job's container, with requests equal to limits
// counted in the pod; the secret's value is neither in the stored pod nor
// in the API server's audit log; the service's log is readable.
func TestKube_PostgresServiceAnswersTheStep(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.CPUs, cfg.Memory = "1", 512<<20
	e := f.executor(t, cfg)
	spec := f.spec(t, runID("pg"))
	spec.Image = kubetest.JobPostgresImage
	const password = "pw-canary-9Zk'quoted"
	spec.Services = []executor.Service{{
		Name: "db", Image: kubetest.JobPostgresImage, Command: []string{"pg-service"},
		Secrets: map[string]string{"POSTGRES_PASSWORD": password},
		Env:     map[string]string{"PGPORT": "5432"},
		Ports:   []int{5432}, Ready: "pg_isready -h 127.0.0.1 -p 5432",
		ReadyTimeout: 2 * time.Minute, CPUs: "300m", MemoryBytes: 256 << 20,
	}}
	s := f.prepare(t, e, spec)
	pod := podOf(t, s)
	res, out, err := runStepWith(t, s, executor.Step{ID: "2", Script: "psql -h 127.0.0.1 -U postgres -tAc 'select 40+2'\n",
		Secrets: map[string]string{"PGPASSWORD": password}}, time.Minute)
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(out), "42") {
		t.Fatalf("step: %+v, %v\n%s", res, err, out)
	}
	res, out, _ = runStepWith(t, s, executor.Step{ID: "3", Script: "psql -h 127.0.0.1 -U postgres -tAc 'select 1'\n",
		Secrets: map[string]string{"PGPASSWORD": "wrong"}}, time.Minute)
	if res.ExitCode == 0 || !strings.Contains(string(out), "password authentication failed") {
		t.Errorf("a wrong password: %+v\n%s", res, out)
	}

	stored := f.storedPod(t, pod)
	if len(stored.Spec.InitContainers) != 1 {
		t.Fatalf("stored pod has %d init containers, want the service's sidecar", len(stored.Spec.InitContainers))
	}
	svc, job := stored.Spec.InitContainers[0], stored.Spec.Containers[0]
	if svc.Name != kube.ServiceContainerPrefix+"db" || svc.RestartPolicy == nil || *svc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("service container %q restartPolicy %v: want a native sidecar", svc.Name, svc.RestartPolicy)
	}
	sj, _ := json.Marshal(svc.SecurityContext)
	jj, _ := json.Marshal(job.SecurityContext)
	if !bytes.Equal(sj, jj) {
		t.Errorf("service securityContext %s, job's %s: want the same hardening", sj, jj)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		req, lim := svc.Resources.Requests[r], svc.Resources.Limits[r]
		if req.IsZero() || req.Cmp(lim) != 0 {
			t.Errorf("service %s: request %s, limit %s: want equal and set", r, req.String(), lim.String())
		}
	}
	if q := svc.Resources.Limits[corev1.ResourceCPU]; q.Cmp(resource.MustParse("300m")) != 0 {
		t.Errorf("service cpu %s, want the workflow's 300m", q.String())
	}
	if stored.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("pod QoS %s with the service, want Guaranteed", stored.Status.QOSClass)
	}
	podJSON, _ := json.Marshal(stored)
	if bytes.Contains(podJSON, []byte("canary")) {
		t.Error("the stored pod holds the service's secret")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := s.(executor.ServiceLogger).ServiceLog(ctx, "db", 1<<20)
	if err != nil || !strings.Contains(string(b), "database system is ready to accept connections") {
		t.Errorf("service log: %v\n%s", err, b)
	}
	if err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	f.c.WaitAuditQuery(t, time.Minute, kubetest.AuditQuery{Verb: "delete", Resource: "pods", Namespace: f.ns, Name: pod})
	n := 0
	_, err = kubetest.ScanAuditLog(f.c.AuditLogPath, func(line []byte) {
		if !kubetest.AuditLineOfNamespace(line, f.ns) {
			return
		}
		n++
		if bytes.Contains(line, []byte("pw-canary")) {
			t.Errorf("the audit log holds the service's secret: %.300s", line)
		}
	})
	if err != nil || n == 0 {
		t.Fatalf("audit log: %d lines of the namespace, %v", n, err)
	}
}

// runStepWith runs step in s, bounded by d.
func runStepWith(t *testing.T, s executor.Session, step executor.Step, d time.Duration) (executor.Result, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out syncbuf.Buffer
	res, err := s.Exec(ctx, step, &out)
	return res, out.Bytes(), err
}

// TestKube_ServiceThatExitsBeforeReadyFailsTheRunNamingIt: a sidecar
// whose command exits (the kubelet restarts it) fails the Prepare with
// reason service, naming it and its exit code, long before its
// ready-timeout, with its log in the setup log; the pod is deleted.
func TestKube_ServiceThatExitsBeforeReadyFailsTheRunNamingIt(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec := f.spec(t, runID("svcexit"))
	var setup syncbuf.Buffer
	spec.Log = &setup
	spec.Services = []executor.Service{{Name: "broken", Image: kubetest.JobBaseImage,
		Command: []string{"/bin/sh", "-c", "echo the-service-said-this; exit 7"}, Ports: []int{6000}, ReadyTimeout: 5 * time.Minute}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := e.Prepare(ctx, spec)
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonService || !strings.Contains(fault.Message, "service broken") || !strings.Contains(fault.Message, "code 7") {
		t.Fatalf("Prepare: %v, want a service fault naming broken and its exit code", err)
	}
	if d := time.Since(start); d > 2*time.Minute {
		t.Errorf("the fault came after %s", d)
	}
	if !strings.Contains(string(setup.Bytes()), "the-service-said-this") {
		t.Errorf("the setup log lacks the service's log:\n%s", setup.Bytes())
	}
	f.noJobPods(t)
}

// TestKube_UnpullableServiceImageFailsWithinThePullGraceNamingIt: a
// service image that cannot be pulled ends the Prepare image-pull within
// the pull grace (not the pending timeout), naming the service and its
// image.
func TestKube_UnpullableServiceImageFailsWithinThePullGraceNamingIt(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.PullPolicy = "IfNotPresent"
	cfg.ImagePullGrace = 5 * time.Second
	cfg.PendingTimeout = 10 * time.Minute
	e := f.executor(t, cfg)
	spec := f.spec(t, runID("svcpull"))
	spec.Services = []executor.Service{{Name: "cache", Image: "localhost:1/knotless/no-such-image:1"}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := e.Prepare(ctx, spec)
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonImagePull || !strings.Contains(fault.Message, "service cache") || !strings.Contains(fault.Message, "no-such-image") {
		t.Fatalf("Prepare: %v, want image-pull naming service cache", err)
	}
	if d := time.Since(start); d > 2*time.Minute {
		t.Errorf("the fault came after %s, want about the 5 s pull grace", d)
	}
	f.noJobPods(t)
}

// noJobPods fails unless the namespace has no job pod left (deletion
// begun counts as gone).
func (f *fixture) noJobPods(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		pods, err := f.c.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: agentenv.LabelManagedBy + "=" + agentenv.ManagedBy})
		left := 0
		if err == nil {
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil {
					left++
				}
			}
		}
		if err == nil && left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job pods left: %d (%v)", left, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
