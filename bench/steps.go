package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
)

// stepsWorkflow has n steps that do nothing (`true`).
func stepsWorkflow(n int) string {
	var b strings.Builder
	b.WriteString("name: bench-steps\non:\n  push:\n    branches: [\"**\"]\nrunners: [bench]\nsteps:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: step-%d\n    run: \"true\"\n", i+1)
	}
	return b.String()
}

// StepsResult holds the figures of the per-step benchmark. Durations are a
// run's, from its start (claimed) to its result recorded, on the server's
// clock.
type StepsResult struct {
	Steps int `json:"steps"` // steps of the long run
	Runs  int `json:"runs"`  // runs of each kind
	// One is the duration of a run with one step, Many of a run with Steps.
	One  Summary `json:"oneStep"`
	Many Summary `json:"manySteps"`
	// PerStepMs is (Many.Median - One.Median) / (Steps - 1).
	PerStepMs float64 `json:"perStepMs"`
}

// benchSteps runs a one-step and a steps-step workflow of `true`, runs times
// each, in turns (after one warm-up run), and derives the cost of a step.
func benchSteps(ctx context.Context, bin string, steps, runs int) (*StepsResult, error) {
	c, err := startCluster(ctx, bin, stepsWorkflow(1))
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
	var one, many []time.Duration
	for i := -1; i < 2*runs; i++ { // i == -1: the warm-up run (it clones the mirror)
		n := 1
		if i >= 0 && i%2 == 1 {
			n = steps
		}
		sha, err := c.commitWorkflow(ctx, i+1, stepsWorkflow(n))
		if err != nil {
			return nil, err
		}
		if err := c.push(ctx); err != nil {
			return nil, err
		}
		run, err := c.waitRunFinished(ctx, sha, 5*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("steps run %d: %w\n%s", i, err, c.logTails())
		}
		if run.State != api.StateSucceeded || run.StartedAt == nil || run.FinishedAt == nil || len(run.Steps) != n+1 {
			return nil, fmt.Errorf("steps run %d: run %d ended %s %s %s with %d steps\n%s", i, run.ID, run.State, run.Reason, run.Message, len(run.Steps), c.logTails())
		}
		if err := c.waitWorkspaceGone(ctx, "runner-1", run.ID); err != nil {
			return nil, err
		}
		time.Sleep(settle)
		if i < 0 {
			continue
		}
		d := run.FinishedAt.Sub(*run.StartedAt)
		if n == 1 {
			one = append(one, d)
		} else {
			many = append(many, d)
		}
		progress("steps %d/%d: a run of %d step(s) took %s", i+1, 2*runs, n, ms(d))
	}
	res := &StepsResult{Steps: steps, Runs: runs, One: summarize(one), Many: summarize(many)}
	res.PerStepMs = (res.Many.Median - res.One.Median) / float64(steps-1)
	return res, nil
}
