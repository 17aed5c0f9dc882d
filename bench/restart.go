package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
)

// restartWorkflow's step prints a counter line every 20 ms until the file
// $BENCH_STOP exists (the runner gives every step BENCH_STOP with --env).
const restartWorkflow = `name: bench-restart
on:
  push:
    branches: ["**"]
runners: [bench]
timeout: 30m
steps:
  - name: count
    run: |
      i=0
      while [ ! -e "$BENCH_STOP" ]; do i=$((i+1)); echo "$i"; sleep 0.02; done
`

// restartSettle is how long the restarted runner streams before the next
// kill; not part of any figure.
const restartSettle = 300 * time.Millisecond

// RestartResult holds the figures of the restart benchmark: a step prints
// continuously; the runner is killed (SIGKILL) and started again, Restarts
// times. Each figure is from just before the new process started to the
// first byte past everything the killed process had written to its spool
// arriving at the server (Server), or at the new process's spool (Spool).
type RestartResult struct {
	Restarts int     `json:"restarts"`
	Server   Summary `json:"server"`
	Spool    Summary `json:"spool"`
	// Lines is how many counter lines the step printed in all; the server
	// holds each exactly once, in order.
	Lines int `json:"lines"`
}

// benchRestart runs the counting step and kills and restarts its runner
// restarts times.
func benchRestart(ctx context.Context, bin string, restarts int) (*RestartResult, error) {
	c, err := startCluster(ctx, bin, restartWorkflow)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := filepath.Join(c.dir, "stop-the-step")
	if err := c.startRunner(ctx, "runner-1", "--env", "BENCH_STOP="+stop); err != nil {
		return nil, err
	}
	if err := c.waitRunnerPolling(ctx, "runner-1"); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTails())
	}
	sha, err := c.commit(ctx, 0)
	if err != nil {
		return nil, err
	}
	if err := c.push(ctx); err != nil {
		return nil, err
	}
	run, err := c.findRun(ctx, sha, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTails())
	}
	spool := filepath.Join(c.work("runner-1"), "spool", strconv.FormatInt(run, 10), "step-1.log")
	res := &RestartResult{Restarts: restarts}
	var atServer, atSpool []time.Duration
	for i := range restarts {
		// The step streams: the server's copy grows.
		s0, err := c.stepLogSize(ctx, run)
		if err != nil {
			return nil, err
		}
		if err := poll(ctx, time.Minute, "the step's log to grow on the server", func() (bool, error) {
			s, err := c.stepLogSize(ctx, run)
			return err == nil && s > s0, nil
		}); err != nil {
			return nil, fmt.Errorf("restart %d: %w\n%s", i, err, c.logTails())
		}
		p := c.runner("runner-1")
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		written := fileSize(spool)
		p, t0, err := c.restartRunner("runner-1")
		if err != nil {
			return nil, err
		}
		var server, local time.Duration
		err = pollEvery(ctx, 2*time.Millisecond, 30*time.Second, "new log bytes after the restart", func() (bool, error) {
			now := time.Since(t0)
			if local == 0 && fileSize(spool) > written {
				local = now
			}
			if s, err := c.stepLogSize(ctx, run); err == nil && s > written {
				server = now
				if local == 0 {
					local = now
				}
			}
			select {
			case <-p.done:
				return true, errors.New("the restarted runner exited")
			default:
			}
			return server > 0, nil
		})
		if err != nil {
			return nil, fmt.Errorf("restart %d: %w\n%s", i, err, c.logTails())
		}
		atServer, atSpool = append(atServer, server), append(atSpool, local)
		progress("restart %d/%d: new log bytes in the spool after %s, at the server after %s", i+1, restarts, ms(local), ms(server))
		time.Sleep(restartSettle)
	}
	res.Server, res.Spool = summarize(atServer), summarize(atSpool)

	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		return nil, err
	}
	final, err := c.waitRunFinished(ctx, sha, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTails())
	}
	if final.State != api.StateSucceeded {
		return nil, fmt.Errorf("run %d ended %s %s %s\n%s", final.ID, final.State, final.Reason, final.Message, c.logTails())
	}
	if res.Lines, err = c.checkCounter(ctx, run); err != nil {
		return nil, err
	}
	return res, nil
}

// findRun waits until the server has a run for sha and returns its ID.
func (c *cluster) findRun(ctx context.Context, sha string, timeout time.Duration) (int64, error) {
	var id int64
	err := poll(ctx, timeout, "a run of "+sha[:8], func() (bool, error) {
		var list api.ListRunsOutput
		if err := c.admin.Query(ctx, api.MethodListRuns, url.Values{"repo": {c.repo}, "limit": {"5"}}, &list); err != nil {
			return false, err
		}
		for _, r := range list.Runs {
			if r.SHA == sha {
				id = r.ID
				return true, nil
			}
		}
		return false, nil
	})
	return id, err
}

// stepLogSize is how many bytes of step 1's log of run the server holds.
func (c *cluster) stepLogSize(ctx context.Context, run int64) (int64, error) {
	var r api.Run
	if err := c.admin.Query(ctx, api.MethodGetRun, url.Values{"run": {fmt.Sprint(run)}}, &r); err != nil {
		return 0, err
	}
	if len(r.Steps) < 2 {
		return 0, nil
	}
	return r.Steps[1].LogSize, nil
}

// checkCounter reads step 1's log of run and checks that it holds the
// lines 1, 2, 3, ... each once, besides the runner's marker lines where
// the output went on after a restart or a reconnect; it returns how many.
func (c *cluster) checkCounter(ctx context.Context, run int64) (int, error) {
	resp, err := c.admin.Do(ctx, http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {"1"}}, "", nil)
	if err != nil {
		return 0, fmt.Errorf("read run %d's log: %w", run, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "[knotless: the runner restarted") || strings.HasPrefix(sc.Text(), "[knotless: the connection to the step agent dropped") {
			continue
		}
		if sc.Text() != strconv.Itoa(n+1) {
			return n, fmt.Errorf("run %d's log: line %d is %q, want %d: bytes were lost or repeated", run, n+1, sc.Text(), n+1)
		}
		n++
	}
	return n, sc.Err()
}

// fileSize is path's size, 0 when it cannot be read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
