package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/syncbuf"
)

// Helpers of the Kubernetes-specific tests (security_test.go,
// stream_test.go, faults_test.go). Every test bounds its waits and cleans
// up its pods (the session's Cleanup, and the namespace's deletion).

var idSeq atomic.Int64

// runID returns a fresh run ID for what a test does (a valid Spec.ID).
func runID(what string) string {
	return fmt.Sprintf("%s-%d-%d", what, time.Now().UnixNano()%1e6, idSeq.Add(1))
}

// spec is a run of id with an empty checkout and a 10 minute timeout.
func (f *fixture) spec(t *testing.T, id string) executor.Spec {
	return executor.Spec{ID: id, Workspace: t.TempDir(), Timeout: 10 * time.Minute, Log: testLog{t, id}}
}

// testLog passes an executor's setup log lines to t.Log.
type testLog struct {
	t  *testing.T
	id string
}

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("[%s setup] %s", l.id, bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// prepare makes a session (within 3 minutes) and cleans it up when the
// test ends.
func (f *fixture) prepare(t *testing.T, e *kube.Executor, spec executor.Spec) executor.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := e.Prepare(ctx, spec)
	if err != nil {
		t.Fatalf("prepare %s: %v", spec.ID, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Cleanup(ctx); err != nil {
			t.Errorf("cleanup %s: %v", spec.ID, err)
		}
	})
	return s
}

type execResult struct {
	res executor.Result
	err error
}

// startStep runs step in s in the background; the channel delivers its
// end.
func startStep(ctx context.Context, s executor.Session, step executor.Step, out io.Writer) <-chan execResult {
	ch := make(chan execResult, 1)
	go func() {
		res, err := s.Exec(ctx, step, out)
		ch <- execResult{res, err}
	}()
	return ch
}

// await waits up to d for a step started by startStep.
func await(t *testing.T, ch <-chan execResult, d time.Duration) (executor.Result, error) {
	t.Helper()
	select {
	case r := <-ch:
		return r.res, r.err
	case <-time.After(d):
		t.Fatalf("the step did not end within %s", d)
		return executor.Result{}, nil
	}
}

// runStep runs a script as step id, bounded by d, and returns its result
// and output.
func runStep(t *testing.T, s executor.Session, id, script string, d time.Duration) (executor.Result, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	var out syncbuf.Buffer
	res, err := await(t, startStep(ctx, s, executor.Step{ID: id, Name: id, Script: script}, &out), d)
	return res, out.Bytes(), err
}

// storedPod is the pod as the API server stores it, read as the admin.
func (f *fixture) storedPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := f.c.Client.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

// waitGone waits up to d until the pod is gone from the API server and
// returns how long that took; it fails the test when it is still there.
func (f *fixture) waitGone(t *testing.T, name string, d time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := f.c.Client.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		cancel()
		if apierrors.IsNotFound(err) {
			return time.Since(t0)
		}
		if time.Since(t0) > d {
			state := fmt.Sprintf("err %v", err)
			if p != nil {
				state = fmt.Sprintf("phase %s, deletionTimestamp %v", p.Status.Phase, p.DeletionTimestamp)
			}
			t.Fatalf("pod %s still exists %s later (%s)", name, d, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
