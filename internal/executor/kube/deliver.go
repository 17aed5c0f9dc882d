package kube

import (
	"context"
	"fmt"
	"io"
	"time"

	"knotless.dev/knotless/internal/executor"
)

// deliver writes the agent's program into the pod over one exec, wakes
// PID 1 to exec it, and returns that same exec as the first connection to
// the agent (its STDIN/STDOUT become `knotless-agent connect`). The first
// exec on a fresh node may fail while the pod already runs (the kubelet's
// serving certificate): it is retried for up to a minute.
func (e *Executor) deliver(ctx context.Context, pod string, bin []byte) (io.ReadWriteCloser, error) {
	deadline := time.Now().Add(time.Minute)
	for attempt := 1; ; attempt++ {
		st, err := e.deliverOnce(ctx, pod, bin)
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("deliver the step agent into pod %s (%d attempts): %w", pod, attempt, err)
		}
		if p, _ := e.pod(pod); p == nil || !running(p) {
			if f := podFault(p, time.Now(), time.Now(), e.cfg.ImagePullGrace, 0); f != nil {
				return nil, &executor.Fault{Reason: f.Reason, Message: f.Message}
			}
		}
		e.log.Debug("delivering the step agent failed; retrying", "pod", pod, "attempt", attempt, "err", err)
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Lines of the delivery exec's own short protocol on STDOUT, before the
// agent protocol starts on the same stream.
const (
	lineSendAgent = "knotless-send-agent"
	lineDelivered = "knotless-agent-delivered"
)

func (e *Executor) deliverOnce(ctx context.Context, pod string, bin []byte) (io.ReadWriteCloser, error) {
	st, err := e.openStream(pod, []string{"/bin/sh", "-c", deliverScript(int64(len(bin)))})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (io.ReadWriteCloser, error) {
		_ = st.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = st.Close() })
	defer stop()
	t0 := time.Now()
	line, err := readLine(st)
	if err != nil {
		return fail(fmt.Errorf("the delivery exec: %w", err))
	}
	tExec := time.Since(t0)
	if line == lineSendAgent {
		if _, err := st.Write(bin); err != nil {
			return fail(fmt.Errorf("send the agent: %w", err))
		}
		tSent := time.Since(t0)
		if line, err = readLine(st); err != nil {
			return fail(fmt.Errorf("the delivery exec after the agent was sent: %w", err))
		}
		e.log.Debug("step agent delivered", "pod", pod, "exec_ms", tExec.Milliseconds(), "sent_ms", tSent.Milliseconds(), "started_ms", time.Since(t0).Milliseconds())
	}
	if line != lineDelivered {
		return fail(fmt.Errorf("the delivery exec said %q", line))
	}
	return st, nil
}

// readLine reads one line byte by byte, so that nothing after it is taken
// from the stream; at most 256 bytes.
func readLine(r io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for len(b) < 256 {
		if _, err := io.ReadFull(r, one); err != nil {
			if len(b) > 0 {
				return "", fmt.Errorf("%w after %q", err, b)
			}
			return "", err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
	return "", fmt.Errorf("no line end in %q", b)
}
