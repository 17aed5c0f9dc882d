// Command scale runs Knotless kube runners against a simulated cluster
// (test/kwok: a throwaway control plane of its own, kwok faking its nodes
// and pods, each pod's command and execs run on this machine so the real
// step agent serves every run) and measures: job pods created per second,
// queued -> Running p50/p99, the runners' Kubernetes API requests per run
// (the control plane's audit log), a runner's RSS with 5,000 pods of its
// label in its informer, and the sweep after a runner is SIGKILLed with
// 1,000 pods of runs it no longer holds; and, beside each, the floor:
// bare client-go doing the same API calls on the same control plane
// (floor.go; -floor=false skips it). `make bench-scale` runs it at
// 1,000 nodes and 5,000 runs; it prints a report and asserts only that
// every run succeeded. Needs root, the local cluster's kube binary
// (`make cluster-build`) and the built programs (`make build`).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"knotless.dev/knotless/test/kwok"
)

// options are the benchmark's sizes.
type options struct {
	bin                 string
	nodes, runs, matrix int
	runners, capacity   int
	fill, orphans       int
	timeout             time.Duration
	keep, asJSON, floor bool
}

// Report is what one invocation measured.
type Report struct {
	Nodes, Runs, Runners, Capacity int
	// NodesSeconds is the time to create the nodes and see them Ready.
	NodesSeconds float64
	// Succeeded counts the runs that ended succeeded; Final those that ended.
	Succeeded, Final int
	RunsSeconds      float64
	// PodsPerSecond is the runners' pod creates over their span (audit
	// log), PeakPodsPerSecond the most in one second.
	PodsPerSecond     float64
	PeakPodsPerSecond int
	// QueuedToRunningP50/P99 (ms): a run's creation (the server's clock)
	// to its pod seen Running (this program's informer).
	QueuedToRunningP50, QueuedToRunningP99 float64
	Matched                                int
	// ClaimedToRunningP50/P99 (ms): a run's start (claimed by a runner,
	// the server's clock) to its pod seen Running: without the wait for a
	// free slot of --capacity.
	ClaimedToRunningP50, ClaimedToRunningP99 float64
	// DeliveryP50/P99 (ms): the step agent's delivery into the pod and
	// its connection (the executor's setup log), over the first exec.
	DeliveryP50, DeliveryP99 float64
	// RequestsPerRun is the runners' API requests per run; ByVerb renders
	// them by verb and resource.
	RequestsPerRun float64
	ByVerb         string
	// RSSIdleKB is runner 0's RSS with no pod; RSSFilledKB with Fill pods
	// of its label in its informer.
	RSSIdleKB, RSSFilledKB, Fill int
	// SweepSeconds is a restarted runner's start to the last of Orphans
	// pods gone; SweepRequests its API requests meanwhile.
	Orphans       int
	SweepSeconds  float64
	SweepRequests int
	SweepByVerb   string
	// CreatedToRunningP50/P99 (ms): a runner's job pod first seen to seen
	// Running, both by PodHost's informer; FloorCreatedToRunningP50/P99
	// the same of the floor's pods.
	CreatedToRunningP50, CreatedToRunningP99 float64

	// The floor (-floor): bare client-go (floor.go) doing what the runs
	// did. FloorPods pods (FloorFailed of them failed) in FloorSeconds;
	// FloorPodsPerSecond and FloorPeakPodsPerSecond its pod creates (audit
	// log) as PodsPerSecond's.
	FloorPods, FloorFailed                             int
	FloorSeconds                                       float64
	FloorPodsPerSecond                                 float64
	FloorPeakPodsPerSecond                             int
	FloorCreatedToRunningP50, FloorCreatedToRunningP99 float64
	// FloorExecP50/P99 (ms): its one exec carrying the agent's bytes, from
	// the first attempt to the end of the one that ran; FloorExecAttempts
	// the attempts per pod (kwok answering "no exec found" meanwhile).
	FloorExecP50, FloorExecP99 float64
	FloorExecAttempts          float64
	// FloorRequestsPerPod is its API requests per pod; FloorByVerb renders
	// them by verb and resource.
	FloorRequestsPerPod float64
	FloorByVerb         string
	// FloorSweepSeconds is its list of Orphans pods to the last one gone;
	// FloorSweepRequests its API requests meanwhile.
	FloorSweepSeconds  float64
	FloorSweepRequests int
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory holding knotless-server and knotless-run")
	flag.IntVar(&o.nodes, "nodes", 1000, "fake nodes")
	flag.IntVar(&o.runs, "runs", 5000, "runs, triggered as pipelines of -matrix runs each (rounded up)")
	flag.IntVar(&o.matrix, "matrix", 50, "runs per triggered pipeline (1-256)")
	flag.IntVar(&o.runners, "runners", 1, "kube runners")
	flag.IntVar(&o.capacity, "capacity", 50, "runs at once per runner (--capacity)")
	flag.IntVar(&o.fill, "fill", 5000, "pods of runner 0's label it holds no run of, for its RSS (0: skip)")
	flag.IntVar(&o.orphans, "orphans", 1000, "of the -fill pods, how many are alive when runner 0 is SIGKILLed and restarted, for the sweep (at most -fill; 0: skip)")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Hour, "the whole benchmark's deadline")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, audit log)")
	flag.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	flag.BoolVar(&o.floor, "floor", true, "after the runs, do the same API calls with bare client-go (the floor), and a bare sweep of -orphans pods")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: scale [flags]

Runs Knotless kube runners against a simulated cluster (kwok, on a control
plane of its own, never the local cluster's) and prints each figure beside
its floor, bare client-go doing the same API calls. Needs root, the local
cluster's kube binary (make cluster-build) and the built programs (make
build). The defaults (1,000 nodes, 5,000 runs) take an hour or more on two
cores; a tiny run, about 40 s:

  scale -nodes 10 -runs 20 -matrix 10 -capacity 5 -fill 50 -orphans 20

Flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	if o.nodes < 1 || o.runs < 1 || o.matrix < 1 || o.matrix > 256 || o.runners < 1 || o.capacity < 1 || o.fill < 0 || o.orphans < 0 || o.orphans > o.fill {
		fmt.Fprintln(os.Stderr, "scale: -nodes, -runs, -runners, -capacity must be at least 1, -matrix 1-256, -orphans at most -fill")
		os.Exit(2)
	}
	bin, err := filepath.Abs(o.bin)
	if err == nil {
		_, err = os.Stat(filepath.Join(bin, "knotless-run"))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scale: -bin %s: %v (run `make build` first)\n", o.bin, err)
		os.Exit(2)
	}
	o.bin = bin
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, o.timeout)
	defer cancel2()
	r, err := run(ctx, o)
	if r != nil {
		if o.asJSON {
			_ = json.NewEncoder(os.Stdout).Encode(r)
		} else {
			printReport(r)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s scale: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// run sets the simulated cluster and Knotless up, then runs the phases.
func run(ctx context.Context, o options) (*Report, error) {
	dir, err := os.MkdirTemp("", "knotless-scale.")
	if err != nil {
		return nil, err
	}
	if o.keep {
		defer fmt.Fprintf(os.Stderr, "scale: files kept in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	modDir, err := kwok.ModuleDir()
	if err != nil {
		return nil, err
	}
	progress("starting the control plane (kwok %s) in %s", kwok.Version, dir)
	cp, err := kwok.StartControlPlane(ctx, kwok.KubeBinary(), filepath.Join(dir, "cluster"))
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	if err := cp.StartKwok(ctx, modDir); err != nil {
		return nil, err
	}
	r := &Report{Nodes: o.nodes, Runs: roundUp(o.runs, o.matrix), Runners: o.runners, Capacity: o.capacity, Fill: o.fill, Orphans: o.orphans}
	h, err := newHarness(ctx, cp)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := h.nodes(ctx, o.nodes); err != nil {
		return r, err
	}
	r.NodesSeconds = time.Since(t0).Seconds()
	progress("%d nodes Ready in %.1f s", o.nodes, r.NodesSeconds)
	hostCtx, stopHost := context.WithCancel(ctx)
	defer stopHost()
	host, err := cp.StartPodHost(hostCtx, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return r, err
	}
	w, err := startWorld(ctx, o.bin, dir, o.matrix)
	defer w.close()
	if err != nil {
		return r, err
	}
	kc, err := cp.Kubeconfig(kwok.RunnerToken)
	if err != nil {
		return r, err
	}
	for i := range o.runners {
		if err := w.addRunner(ctx, fmt.Sprintf("scale-%d", i), kc, kwok.Namespace, o.capacity); err != nil {
			return r, err
		}
	}
	if err := runsPhase(ctx, o, cp, w, host, r); err != nil {
		return r, fmt.Errorf("%w\n%s", err, tails(dir, cp))
	}
	if o.floor {
		if err := floorPhase(ctx, o, cp, host, h, r); err != nil {
			return r, fmt.Errorf("%w\n%s", err, tails(dir, cp))
		}
	}
	if o.fill > 0 {
		if err := fillPhase(ctx, o, cp, w, h, r); err != nil {
			return r, fmt.Errorf("%w\n%s", err, tails(dir, cp))
		}
	}
	return r, nil
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// tails returns the last lines of the runners' and kwok's logs.
func tails(dir string, cp *kwok.ControlPlane) string {
	s := "--- kwok:\n" + cp.LogTail("kwok") + "\n--- kube-apiserver:\n" + cp.LogTail("kube-apiserver")
	b, _ := os.ReadFile(filepath.Join(dir, "scale-0.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return s + "\n--- runner scale-0:\n" + string(b)
}

func printReport(r *Report) {
	fmt.Printf("nodes %d (Ready in %.1f s), runs %d through %d runner(s) of capacity %d\n", r.Nodes, r.NodesSeconds, r.Runs, r.Runners, r.Capacity)
	fmt.Printf("runs succeeded %d of %d final, in %.1f s\n", r.Succeeded, r.Final, r.RunsSeconds)
	fmt.Printf("pods created per second %.1f (peak %d in one second)\n", r.PodsPerSecond, r.PeakPodsPerSecond)
	fmt.Printf("queued -> Running p50 %.0f ms, p99 %.0f ms (%d runs matched to their pod)\n", r.QueuedToRunningP50, r.QueuedToRunningP99, r.Matched)
	fmt.Printf("claimed -> Running p50 %.0f ms, p99 %.0f ms\n", r.ClaimedToRunningP50, r.ClaimedToRunningP99)
	fmt.Printf("pod created -> Running p50 %.0f ms, p99 %.0f ms (PodHost's informer)\n", r.CreatedToRunningP50, r.CreatedToRunningP99)
	fmt.Printf("agent delivered and connected p50 %.0f ms, p99 %.0f ms\n", r.DeliveryP50, r.DeliveryP99)
	fmt.Printf("API requests per run %.2f: %s\n", r.RequestsPerRun, r.ByVerb)
	if r.Fill > 0 {
		fmt.Printf("runner RSS idle %d KiB, with %d pods of its label %d KiB\n", r.RSSIdleKB, r.Fill, r.RSSFilledKB)
	}
	if r.Orphans > 0 {
		fmt.Printf("sweep of %d orphans after SIGKILL: %.1f s from restart, %d API requests (%s)\n", r.Orphans, r.SweepSeconds, r.SweepRequests, r.SweepByVerb)
	}
	if r.FloorPods > 0 {
		fmt.Printf("floor (bare client-go, the same calls): %d pods in %.1f s (%.1f a second; %d failed)\n", r.FloorPods, r.FloorSeconds, float64(r.FloorPods)/r.FloorSeconds, r.FloorFailed)
		fmt.Printf("floor: pods created per second %.1f (peak %d in one second), pod created -> Running p50 %.0f ms, p99 %.0f ms\n", r.FloorPodsPerSecond, r.FloorPeakPodsPerSecond, r.FloorCreatedToRunningP50, r.FloorCreatedToRunningP99)
		fmt.Printf("floor: exec with the agent's bytes p50 %.0f ms, p99 %.0f ms, %.2f attempts a pod\n", r.FloorExecP50, r.FloorExecP99, r.FloorExecAttempts)
		fmt.Printf("floor: API requests per pod %.2f: %s\n", r.FloorRequestsPerPod, r.FloorByVerb)
	}
	if r.FloorSweepSeconds > 0 {
		fmt.Printf("floor: sweep of %d orphans (list, deletes under the runner's rate limit): %.1f s, %d API requests\n", r.Orphans, r.FloorSweepSeconds, r.FloorSweepRequests)
	}
}
