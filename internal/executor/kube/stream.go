package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// executor returns the pods/exec stream executor for argv in the job
// container of pod (PodExec).
func (e *Executor) executor(pod string, argv []string, stdin bool) (remotecommand.Executor, error) {
	return PodExec(e.rest, e.client, e.ns, pod, Container, argv, stdin)
}

// PodExec returns a stream executor for argv (no shell) in container of
// namespace/pod through the API server's pods/exec subresource: WebSocket
// (protocol v5, which can close STDIN) with client-go's fallback to SPDY
// when the upgrade fails or a proxy cannot carry it, as kubectl does.
// stdin says whether the exec gets a STDIN stream (without one, SPDY
// would wait for it). cfg's user needs create (and, for older servers,
// get) on pods/exec. Errors: cfg cannot make either executor.
func PodExec(cfg *rest.Config, client kubernetes.Interface, namespace, pod, container string, argv []string, stdin bool) (remotecommand.Executor, error) {
	req := client.CoreV1().RESTClient().Post().
		Namespace(namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   argv,
			Stdin:     stdin,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("WebSocket exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("SPDY exec: %w", err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// stream is one exec of `knotless-agent connect` as a byte stream to the
// agent: writes go to the exec's STDIN, reads come from its STDOUT. Its
// STDERR (the bridge's own complaints) is kept for errors. Close ends the
// exec; the agent and its steps go on.
type stream struct {
	inR  *io.PipeReader
	inW  *io.PipeWriter
	outR *io.PipeReader
	outW *io.PipeWriter

	cancel context.CancelFunc
	done   chan struct{}

	stderr agentenv.StderrTail

	mu  sync.Mutex
	err error // how the exec ended
}

// openStream starts argv in pod (`knotless-agent connect`, or the
// delivery script that becomes it) with STDIN, STDOUT and STDERR. It
// returns at once; a failure to set the exec up shows as the stream's
// first read error, with what the command wrote to STDERR.
func (e *Executor) openStream(pod string, argv []string) (*stream, error) {
	exe, err := e.executor(pod, argv, true)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{cancel: cancel, done: make(chan struct{})}
	s.inR, s.inW = io.Pipe()
	s.outR, s.outW = io.Pipe()
	go func() {
		defer close(s.done)
		err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: s.inR, Stdout: s.outW, Stderr: &s.stderr})
		if err == nil {
			err = io.EOF
		} else {
			err = s.stderr.Explain(err)
		}
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		_ = s.outW.CloseWithError(err)
		_ = s.inR.CloseWithError(err)
	}()
	return s, nil
}

func (s *stream) Read(p []byte) (int, error)  { return s.outR.Read(p) }
func (s *stream) Write(p []byte) (int, error) { return s.inW.Write(p) }

// Close ends the exec and waits for its goroutine.
func (s *stream) Close() error {
	_ = s.inW.Close()
	s.cancel()
	_ = s.outR.Close()
	<-s.done
	return nil
}

// quietHandler passes client-go's own log lines (klog) on at debug level:
// it reports a closed exec stream as an error although closing it is how
// a connection to the agent ends.
type quietHandler struct{ slog.Handler }

func (h quietHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.Handler.Enabled(ctx, slog.LevelDebug) {
		return nil // klog's bridge does not always ask Enabled first
	}
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name)}
}

var klogOnce sync.Once

// quietKlog sends klog's lines to log at debug level (once per process).
func quietKlog(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(slog.New(quietHandler{log.Handler()}).With("source", "client-go")) })
}
