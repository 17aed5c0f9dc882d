// Command demo-scale is `make demo-scale`: PostgreSQL, several
// knotless-server replicas behind a reverse proxy, runners with the shell
// executor, pipelines pushed, one replica killed with SIGKILL midway and
// started again; it prints a summary and exits 1 unless every run ended
// exactly once with its whole log and nothing was claimed twice.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"knotless.dev/knotless/test/scale"
)

func main() {
	var cfg scale.Config
	flag.StringVar(&cfg.Bin, "bin", "bin", "directory of knotless-server, knotless-run and knotless-agent (make build)")
	flag.IntVar(&cfg.Replicas, "replicas", 3, "server replicas")
	flag.IntVar(&cfg.Runners, "runners", 20, "runners (shell executor, one run at a time each)")
	flag.IntVar(&cfg.Pipelines, "pipelines", 100, "pipelines pushed, one run each")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "for the whole demo")
	flag.Parse()
	cfg.Out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	sum, err := scale.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-scale:", err)
		os.Exit(1)
	}
	fmt.Printf("\n%s(demo took %s)\n", sum, time.Since(start).Round(time.Second))
	if !sum.OK() {
		os.Exit(1)
	}
}
