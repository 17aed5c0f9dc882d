// Command bench measures Knotless with its real programs as processes: push
// to first step started (against `git push` alone), log throughput from
// runner to server (against the runner alone), the cost of a step, a runner
// restart to its step streaming again, and a server holding many idle
// runners' long polls. `make bench` runs it; it prints a table (or JSON with
// -json) and asserts nothing.
//
// Each benchmark starts its own knotless-server on a temporary data
// directory and stops every process it started when it ends, also on
// failure and Ctrl-C: the step agents the runners started included.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Report is everything one invocation measured; a benchmark not selected
// with -only is nil.
type Report struct {
	Machine Machine        `json:"machine"`
	Push    *PushResult    `json:"push,omitempty"`
	Log     *LogResult     `json:"log,omitempty"`
	Steps   *StepsResult   `json:"steps,omitempty"`
	Restart *RestartResult `json:"restart,omitempty"`
	Idle    *IdleResult    `json:"idle,omitempty"`
	// KubeBurst is kubeburst's (bench/kubeburst.go), only when -only names it.
	KubeBurst *KubeBurstResult `json:"kubeBurst,omitempty"`
	// KubeLogs is kubelogs's (bench/kubelogs.go), only when -only names it.
	KubeLogs *KubeLogsResult `json:"kubeLogs,omitempty"`
}

// benchmarks are the names -only takes, in the order they run.
var benchmarks = []string{"push", "log", "steps", "restart", "idle"}

func main() {
	bin := flag.String("bin", "bin", "directory holding knotless-server and knotless-run")
	n := flag.Int("n", 20, "push benchmark: measured pushes (after one warm-up push)")
	logMB := flag.Int("log-mb", 100, "log benchmark: megabytes (10^6 bytes) the step prints")
	logRuns := flag.Int("log-runs", 3, "log benchmark: runs")
	steps := flag.Int("steps", 50, "steps benchmark: steps of the long run")
	stepsRuns := flag.Int("steps-runs", 5, "steps benchmark: runs of each length")
	restarts := flag.Int("restarts", 10, "restart benchmark: runner restarts")
	runners := flag.Int("runners", 200, "idle benchmark: runners long-polling")
	idle := flag.Duration("idle", 30*time.Second, "idle benchmark: measuring window")
	only := flag.String("only", strings.Join(benchmarks, ","), "benchmarks to run, comma-separated: "+strings.Join(benchmarks, ", ")+
		"; and "+kubeBurstName+" and "+kubeLogsName+", only when named (they need the local Kubernetes cluster: make cluster-up)")
	asJSON := flag.Bool("json", false, "print the report as JSON instead of a table")
	flag.Parse()

	selected := map[string]bool{}
	for _, name := range strings.Split(*only, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(benchmarks, name) && name != kubeBurstName && name != kubeLogsName {
			fmt.Fprintf(os.Stderr, "bench: -only: unknown benchmark %q (want %s, %s or %s)\n", name, strings.Join(benchmarks, ", "), kubeBurstName, kubeLogsName)
			os.Exit(2)
		}
		selected[name] = true
	}
	if *n < 1 || *logMB < 1 || *logRuns < 1 || *stepsRuns < 1 || *restarts < 1 || *runners < 1 || *idle < time.Second {
		fmt.Fprintln(os.Stderr, "bench: -n, -log-mb, -log-runs, -steps-runs, -restarts and -runners must be at least 1, -idle at least 1s")
		os.Exit(2)
	}
	if *steps < 2 {
		fmt.Fprintln(os.Stderr, "bench: -steps must be at least 2")
		os.Exit(2)
	}
	dir, err := filepath.Abs(*bin)
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "knotless-server"))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: -bin %s: %v (run `make build` first)\n", *bin, err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := Report{Machine: machine()}
	cfg := config{bin: dir, pushes: *n, logMB: *logMB, logRuns: *logRuns, steps: *steps, stepsRuns: *stepsRuns,
		restarts: *restarts, runners: *runners, idle: *idle}
	err = runSelected(ctx, &rep, selected, cfg)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printReport(os.Stdout, rep)
		printKubeBurst(os.Stdout, rep.KubeBurst)
		printKubeLogs(os.Stdout, rep.KubeLogs)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "bench: interrupted; every process it started was stopped")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// config is what the flags ask for.
type config struct {
	bin            string // absolute
	pushes         int
	logMB, logRuns int
	steps          int
	stepsRuns      int
	restarts       int
	runners        int
	idle           time.Duration
}

// runSelected runs the selected benchmarks in order and stops at the first
// error; the figures of those that finished stay in rep.
func runSelected(ctx context.Context, rep *Report, selected map[string]bool, cfg config) error {
	var err error
	if selected["push"] {
		if rep.Push, err = benchPush(ctx, cfg.bin, cfg.pushes); err != nil {
			return fmt.Errorf("push benchmark: %w", err)
		}
	}
	if selected["log"] {
		if rep.Log, err = benchLogs(ctx, cfg.bin, cfg.logMB, cfg.logRuns); err != nil {
			return fmt.Errorf("log benchmark: %w", err)
		}
	}
	if selected["steps"] {
		if rep.Steps, err = benchSteps(ctx, cfg.bin, cfg.steps, cfg.stepsRuns); err != nil {
			return fmt.Errorf("steps benchmark: %w", err)
		}
	}
	if selected["restart"] {
		if rep.Restart, err = benchRestart(ctx, cfg.bin, cfg.restarts); err != nil {
			return fmt.Errorf("restart benchmark: %w", err)
		}
	}
	if selected[kubeBurstName] {
		if rep.KubeBurst, err = benchKubeBurst(ctx, cfg.bin, kubeBurstFlags); err != nil {
			return fmt.Errorf("kubeburst benchmark: %w", err)
		}
	}
	if selected[kubeLogsName] {
		if rep.KubeLogs, err = benchKubeLogs(ctx, cfg.bin, kubeLogsFlags); err != nil {
			return fmt.Errorf("kubelogs benchmark: %w", err)
		}
	}
	if selected["idle"] {
		if rep.Idle, err = benchIdle(ctx, cfg.bin, cfg.runners, cfg.idle); err != nil {
			return fmt.Errorf("idle benchmark: %w", err)
		}
	}
	return nil
}
