package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"knotless.dev/knotless/internal/api"
)

// pushWorkflow has one step whose first act is printing the time (ns since
// the epoch): the moment the step's process started, by this machine's
// clock.
const pushWorkflow = `name: bench
on:
  push:
    branches: ["**"]
runners: [bench]
steps:
  - name: first
    run: date +%s%N
`

// settle is the pause after a run's workspace is gone, so the runner is
// back in its long poll before the next push; it is not part of any figure.
const settle = 100 * time.Millisecond

// PushResult holds the figures of the push benchmark.
type PushResult struct {
	Runs   int `json:"runs"`   // measured pushes
	Warmup int `json:"warmup"` // pushes before them, not measured
	// Push is the duration of `git push` itself.
	Push Summary `json:"push"`
	// Queued is push start → the run created (the server's clock, ms).
	Queued Summary `json:"queued"`
	// FirstStep is push start → the first step's process started.
	FirstStep Summary `json:"firstStep"`
	// Succeeded is push start → the run recorded succeeded (server, ms).
	Succeeded Summary `json:"succeeded"`
	// Ratio is FirstStep.Median / Push.Median: push to first step against
	// `git push` alone, both measured in this invocation.
	Ratio float64 `json:"ratioToPush"`
}

// benchPush pushes n new commits, one at a time, to a server with one idle
// shell runner (capacity 1), and times each push to its first step.
func benchPush(ctx context.Context, bin string, n int) (*PushResult, error) {
	const warmup = 1 // the first push also clones the runner's mirror
	c, err := startCluster(ctx, bin, pushWorkflow)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.startRunner(ctx, "runner-1"); err != nil {
		return nil, err
	}
	if err := c.waitRunnerPolling(ctx, "runner-1"); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTails())
	}
	res := &PushResult{Runs: n, Warmup: warmup}
	var push, queued, first, done []time.Duration
	for i := range warmup + n {
		sha, err := c.commit(ctx, i)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := c.push(ctx); err != nil {
			return nil, err
		}
		pushed := time.Since(t0)
		run, err := c.waitRunFinished(ctx, sha, time.Minute)
		if err != nil {
			return nil, fmt.Errorf("push %d: %w\n%s", i, err, c.logTails())
		}
		if run.State != api.StateSucceeded || run.FinishedAt == nil {
			return nil, fmt.Errorf("push %d: run %d ended %s %s %s\n%s", i, run.ID, run.State, run.Reason, run.Message, c.logTails())
		}
		started, err := c.stepStart(ctx, run.ID)
		if err != nil {
			return nil, err
		}
		if err := c.waitWorkspaceGone(ctx, "runner-1", run.ID); err != nil {
			return nil, err
		}
		time.Sleep(settle)
		if i < warmup {
			continue
		}
		push = append(push, pushed)
		queued = append(queued, run.CreatedAt.Sub(t0))
		first = append(first, started.Sub(t0))
		done = append(done, run.FinishedAt.Sub(t0))
		progress("push %d/%d: git push %s, first step after %s, succeeded after %s",
			i-warmup+1, n, ms(pushed), ms(started.Sub(t0)), ms(run.FinishedAt.Sub(t0)))
	}
	res.Push, res.Queued, res.FirstStep, res.Succeeded = summarize(push), summarize(queued), summarize(first), summarize(done)
	res.Ratio = res.FirstStep.Median / res.Push.Median
	return res, nil
}

// stepStart reads the time step 1 of run printed as its first line.
func (c *cluster) stepStart(ctx context.Context, run int64) (time.Time, error) {
	line, err := c.firstLogLine(ctx, run, 1)
	if err != nil {
		return time.Time{}, err
	}
	return parseNanos(line)
}

// parseNanos reads what `date +%s%N` printed.
func parseNanos(line string) (time.Time, error) {
	ns, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("step printed %q, want nanoseconds since the epoch", line)
	}
	return time.Unix(0, ns), nil
}

// waitWorkspaceGone waits until the runner removed the run's directory,
// which it does just before it goes back to claiming.
func (c *cluster) waitWorkspaceGone(ctx context.Context, runner string, run int64) error {
	dir := filepath.Join(c.dir, runner+"-work", "runs", strconv.FormatInt(run, 10))
	return poll(ctx, 30*time.Second, "the runner to remove "+dir, func() (bool, error) {
		_, err := os.Stat(dir)
		return os.IsNotExist(err), nil
	})
}

// ms formats d in milliseconds with one decimal.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// progress prints a line about what the benchmarks are doing to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}
