package kube

import (
	"context"
	"encoding/json"
	"io"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentsession"
)

// session is the agent session of one job pod, with one correction: the
// step agent, PID 1 of the pod, stops the running step with reason
// cancelled whenever it shuts down, also when the kubelet sends it
// SIGTERM because the pod is being deleted from outside, evicted or past
// its activeDeadlineSeconds. A step that ends cancelled although neither
// the caller's ctx nor Cleanup asked for it was stopped by the
// environment: its Result takes the pod's own reason (pod-lost, evicted,
// timeout), never cancelled, which would read as a person's doing.
type session struct {
	*agentsession.Session
	e       *Executor
	pod     string
	cleaned atomic.Bool
}

// wrap returns s as the kube executor hands it out.
func (e *Executor) wrap(s *agentsession.Session) executor.Session {
	var d handleData
	_ = json.Unmarshal(s.Handle().Data, &d)
	return &session{Session: s, e: e, pod: d.Pod}
}

// Cleanup notes that a cancellation from now on is the runner's own.
func (s *session) Cleanup(ctx context.Context) error {
	s.cleaned.Store(true)
	return s.Session.Cleanup(ctx)
}

// Exec is agentsession.Session.Exec; a step cancelled by nobody gets the
// pod's reason (stoppedByPod).
func (s *session) Exec(ctx context.Context, step executor.Step, out io.Writer) (executor.Result, error) {
	res, err := s.Session.Exec(ctx, step, out)
	if err != nil || res.Reason != api.ReasonCancelled || ctx.Err() != nil || s.cleaned.Load() {
		return res, err
	}
	return s.e.stoppedByPod(s.pod, res), nil
}

// stoppedByPod is the Result of a step the agent stopped on its own:
// what the API server says of the pod (asked afresh, for up to 10 s while
// it says nothing yet, as the kubelet reports an eviction after it
// signalled the container), else pod-lost.
func (e *Executor) stoppedByPod(pod string, res executor.Result) executor.Result {
	note := "the step agent stopped the step though nobody cancelled it: the pod's PID 1 was signalled (the pod is being deleted, evicted or ended)"
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p, err := e.client.CoreV1().Pods(e.ns).Get(ctx, pod, metav1.GetOptions{})
		cancel()
		if apierrors.IsNotFound(err) {
			p, err = nil, nil
		}
		if err == nil {
			if f := podFault(p, time.Now(), time.Now(), 0, 0); f != nil {
				res.Reason, res.Note = f.Reason, f.Message
				return res
			}
		}
		if time.Now().After(deadline) {
			res.Reason, res.Note = ReasonPodLost, note
			return res
		}
		time.Sleep(250 * time.Millisecond)
	}
}
