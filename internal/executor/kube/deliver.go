package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// delivery is what delivering the agent into a pod found.
type delivery struct {
	stream io.ReadWriteCloser // the first connection to the agent
	arch   string             // the pod's architecture (GOARCH), "" when the agent was there already
	size   int                // bytes of agent sent
	// assumed says why arch was assumed, for an image without uname; ""
	// when the pod reported it.
	assumed string
}

// deliver writes the agent's program into the pod over one exec, wakes
// PID 1 to exec it, and returns that same exec as the first connection to
// the agent (its STDIN/STDOUT become `knotless-agent connect`). The exec
// first reports the pod's architecture (`uname -m`), and the agent built
// for it is sent (loadAgent): one runner serves a cluster of amd64 and
// arm64 nodes. The first exec on a fresh node may fail while the pod
// already runs (the kubelet's serving certificate): it is retried for up
// to a minute. An agent that cannot execute there (exec format error),
// or no agent for the pod's architecture, ends it at once with a
// *executor.Fault naming the architecture.
func (e *Executor) deliver(ctx context.Context, pod, node string) (delivery, error) {
	deadline := time.Now().Add(time.Minute)
	for attempt := 1; ; attempt++ {
		d, err := e.deliverOnce(ctx, pod, node, attempt == 1)
		if err == nil {
			return d, nil
		}
		var f *executor.Fault
		if errors.As(err, &f) {
			return delivery{}, err
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return delivery{}, fmt.Errorf("deliver the step agent into pod %s (%d attempts): %w", pod, attempt, err)
		}
		if p, _ := e.pod(pod); p == nil || !running(p) {
			if f := podFault(p, time.Now(), time.Now(), e.cfg.ImagePullGrace, 0); f != nil {
				return delivery{}, f
			}
		}
		e.log.Debug("delivering the step agent failed; retrying", "pod", pod, "attempt", attempt, "err", err)
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return delivery{}, ctx.Err()
		}
	}
}

// Lines of the delivery exec's own short protocol on STDOUT, before the
// agent protocol starts on the same stream: "knotless-send-agent MACHINE"
// (uname -m) asks for the program, the runner answers with its size in
// decimal and a newline, then its bytes; "knotless-agent-delivered" ends
// it.
const (
	lineSendAgent = "knotless-send-agent"
	lineDelivered = "knotless-agent-delivered"
)

// errOtherMachine is a delivery that sent the agent for the machine the
// node's earlier job pods reported, in a pod that reports another: the
// next attempt waits to be asked.
var errOtherMachine = errors.New("the agent was sent for the machine earlier job pods on the node reported, and this pod reports another")

// deliverOnce is one delivery over one exec. With early set and the
// node's machine known from an earlier job pod, the agent for it is sent
// as soon as the exec is open, before the pod asks (its bytes wait in the
// exec's STDIN until the script reads them): the pod's shell and uname
// start while they travel. A pod that reports another machine ends the
// script before it reads them (errOtherMachine).
func (e *Executor) deliverOnce(ctx context.Context, pod, node string, early bool) (delivery, error) {
	var sent chan error // the early send's result; nil when none is under way
	var sentFor string
	var bin []byte
	if m, ok := e.nodeMachine.Load(node); ok && early {
		if b, err := e.loadAgent(agentenv.UnameArch(m.(string))); err == nil {
			sentFor, bin = m.(string), b
		}
	}
	st, err := e.openStream(pod, []string{"/bin/sh", "-c", deliverScript()})
	if err != nil {
		return delivery{}, err
	}
	fail := func(err error) (delivery, error) {
		_ = st.Close()
		if sent != nil {
			<-sent
		}
		return delivery{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = st.Close() })
	defer stop()
	t0 := time.Now()
	if sentFor != "" {
		sent = make(chan error, 1)
		go func() { sent <- sendAgent(st, bin, sentFor) }()
	}
	line, err := readLine(st)
	if err != nil {
		return fail(fmt.Errorf("the delivery exec: %w", err))
	}
	tAsked := time.Since(t0)
	machine, asked := strings.CutPrefix(line, lineSendAgent+" ")
	d := delivery{}
	switch {
	case sent != nil && !asked:
		// Sent before asked, but the pod did not ask (an agent listening
		// there already): the bytes would reach that agent.
		return fail(fmt.Errorf("the delivery exec said %q where it asks for the agent", line))
	case sent != nil:
		if machine != sentFor && machine != "unknown" {
			e.nodeMachine.Store(node, machine)
			return fail(fmt.Errorf("pod %s: %w (%s, not %s)", pod, errOtherMachine, machine, sentFor))
		}
		d.arch = agentenv.UnameArch(sentFor)
		if machine == "unknown" {
			d.assumed = "as earlier job pods on node " + node + " reported"
		}
		err := <-sent
		sent = nil
		if err != nil {
			return fail(err)
		}
	case asked:
		d.arch = agentenv.UnameArch(machine)
		switch {
		case machine == "unknown":
			// An image without uname: the node's architecture as its
			// earlier job pods reported it, else the runner's own (an
			// agent of the wrong one fails at once, naming it).
			d.arch, d.assumed = runtime.GOARCH, "the runner's own"
			if m, ok := e.nodeMachine.Load(node); ok {
				d.arch, d.assumed = agentenv.UnameArch(m.(string)), "as earlier job pods on node "+node+" reported"
			}
		case d.arch == "":
			return fail(&executor.Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf("the job pod reports machine %q (uname -m), an architecture Knotless has no step agent for", machine)})
		default:
			e.nodeMachine.Store(node, machine)
		}
		if bin, err = e.loadAgent(d.arch); err != nil {
			return fail(&executor.Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf("the job pod runs on node %s, linux/%s: %v", node, d.arch, err)})
		}
		if err := sendAgent(st, bin, ""); err != nil {
			return fail(err)
		}
	}
	if asked {
		d.size = len(bin)
		tSent := time.Since(t0)
		if line, err = readLine(st); err != nil {
			return fail(fmt.Errorf("the delivery exec after the agent was sent: %w", err))
		}
		msg := "step agent delivered"
		if sentFor != "" {
			msg += " before the pod asked"
		}
		e.log.Debug(msg, "pod", pod, "arch", d.arch, "asked_ms", tAsked.Milliseconds(), "sent_ms", tSent.Milliseconds(), "started_ms", time.Since(t0).Milliseconds())
	}
	if line != lineDelivered {
		return fail(fmt.Errorf("the delivery exec said %q", line))
	}
	d.stream = st
	return d, nil
}

// sendAgent writes the size line (and the machine the agent is for, when
// sent before the pod asked) and the program's bytes.
func sendAgent(w io.Writer, bin []byte, machine string) error {
	size := strconv.Itoa(len(bin))
	if machine != "" {
		size += " " + machine
	}
	if _, err := io.WriteString(w, size+"\n"); err != nil {
		return fmt.Errorf("send the agent's size: %w", err)
	}
	if _, err := w.Write(bin); err != nil {
		return fmt.Errorf("send the agent: %w", err)
	}
	return nil
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
