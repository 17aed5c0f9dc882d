package runnercli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"knotless.dev/knotless/internal/metrics"
	"knotless.dev/knotless/internal/runner"
)

// serveMetrics serves m at http://addr/metrics and /healthz until stop is
// called. An address that cannot be listened on is an error at start.
func serveMetrics(addr string, m *runner.Metrics, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(m.Registry))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("serve metrics", "addr", addr, "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
