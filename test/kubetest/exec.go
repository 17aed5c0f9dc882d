package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// Exec runs argv (no shell) in container of pod namespace/pod through the
// API server's pods/exec subresource as cfg's user, with the WebSocket
// executor (protocol v5, which can close STDIN) and a fallback to SPDY if
// the WebSocket upgrade fails. stdin, if not nil, is sent and then closed;
// if nil, the command gets no STDIN stream (Stdin: true without a stream
// hangs over SPDY). cfg's user needs create (and, for older servers, get)
// on pods/exec.
//
// It returns the command's stdout and stderr and its exit code; err is nil
// when the command ran to an exit status, whatever it was. When the stream
// could not be set up or broke, err says so and exitCode is -1. A
// cancelled ctx ends the stream.
func Exec(ctx context.Context, cfg *rest.Config, namespace, pod, container string, argv []string, stdin io.Reader) (stdout, stderr []byte, exitCode int, err error) {
	client, err := clientFor(cfg)
	if err != nil {
		return nil, nil, -1, fmt.Errorf("exec in %s/%s: make client: %w", namespace, pod, err)
	}
	exe, err := newExecutor(cfg, client, namespace, pod, container, argv, stdin != nil)
	if err != nil {
		return nil, nil, -1, fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
	}
	var out, errOut bytes.Buffer
	err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	if err == nil {
		return out.Bytes(), errOut.Bytes(), 0, nil
	}
	var exit utilexec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		return out.Bytes(), errOut.Bytes(), exit.ExitStatus(), nil
	}
	return out.Bytes(), errOut.Bytes(), -1, fmt.Errorf("exec %q in %s/%s: %w", argv, namespace, pod, err)
}

// clients holds one clientset per *rest.Config Exec was given, so that
// repeated execs do not build one each (about 0.6 ms; see BENCH.md).
var clients sync.Map // *rest.Config → kubernetes.Interface

func clientFor(cfg *rest.Config) (kubernetes.Interface, error) {
	if c, ok := clients.Load(cfg); ok {
		return c.(kubernetes.Interface), nil
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	actual, _ := clients.LoadOrStore(cfg, kubernetes.Interface(c))
	return actual.(kubernetes.Interface), nil
}

// WaitExecReady runs `true` in the container until it exits 0 or ctx ends.
// On a fresh node a pod can be Running while exec still fails for a while
// (the kubelet's serving certificate): call it before an exec whose STDIN
// cannot be replayed. It costs one exec round trip (~0.2 s here) when exec
// already works: an executor should rather retry its first exec when that
// exec's STDIN can be replayed.
func WaitExecReady(ctx context.Context, cfg *rest.Config, namespace, pod, container string) error {
	var last error
	for {
		_, stderr, code, err := Exec(ctx, cfg, namespace, pod, container, []string{"true"}, nil)
		switch {
		case err == nil && code == 0:
			return nil
		case err == nil:
			last = fmt.Errorf("`true` exited %d: %s", code, stderr)
		default:
			last = err
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return fmt.Errorf("wait until exec works in %s/%s: %w (last attempt: %v)", namespace, pod, err, last)
		}
	}
}
