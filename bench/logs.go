package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
)

// logLine is what the log step prints over and over: 99 bytes and a newline.
var logLine = strings.Repeat("x", 99)

// logScript prints the time, size bytes of 100-byte lines, and the time
// again (each time ns since the epoch, on a line of its own).
func logScript(size int64) string {
	return fmt.Sprintf("date +%%s%%N\nyes '%s' | head -c %d\ndate +%%s%%N\n", logLine, size)
}

func logWorkflow(size int64) string {
	return `name: bench-log
on:
  push:
    branches: ["**"]
runners: [bench]
timeout: 30m
steps:
  - name: print
    run: |
` + indent(logScript(size), "      ")
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "") + "\n"
}

// LogRun is one run of the log benchmark.
type LogRun struct {
	Bytes int64 `json:"bytes"` // the step's log as the server holds it
	// StepMs is the step's own duration: its first to its last printed time.
	StepMs float64 `json:"stepMs"`
	// TotalMs is step start → run recorded succeeded, the whole log stored.
	TotalMs float64 `json:"totalMs"`
	// ExecMs is `knotless-run exec` of the same workflow, run right after
	// this run, its output into /dev/null, the whole process timed.
	ExecMs float64 `json:"execMs"`
	// MBps is the printed megabytes (10^6 bytes) over TotalMs.
	MBps float64 `json:"mbPerSecond"`
}

// LogResult holds the figures of the log throughput benchmark.
type LogResult struct {
	MB       int      `json:"mb"`       // megabytes (10^6 bytes) the step prints
	LogLimit string   `json:"logLimit"` // the runner's --log-limit
	Runs     []LogRun `json:"runs"`
	// MedianMBps is the median of Runs[].MBps.
	MedianMBps float64 `json:"medianMbPerSecond"`
	// GeneratorMBps: the step's pipeline alone into /dev/null (median of 3).
	GeneratorMBps float64 `json:"generatorMbPerSecond"`
	// ExecMBps: `knotless-run exec` of the same workflow, its output into
	// /dev/null, whole process timed, once after each run (median of
	// Runs[].ExecMs as MB/s): the runner's pipeline without a server.
	ExecMBps float64 `json:"execMbPerSecond"`
	// Ratio is MedianMBps / ExecMBps: the log path to the server against
	// the runner alone, both measured in this invocation.
	Ratio float64 `json:"ratioToExec"`
}

// benchLogs runs a step printing mb megabytes through a runner to a server,
// times times, and measures how fast the whole log reaches the server.
func benchLogs(ctx context.Context, bin string, mb, times int) (*LogResult, error) {
	size := int64(mb) * 1_000_000
	res := &LogResult{MB: mb, LogLimit: fmt.Sprintf("%dMi", 2*mb)}
	c, err := startCluster(ctx, bin, logWorkflow(size))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.startRunner(ctx, "runner-1", "--log-limit", res.LogLimit); err != nil {
		return nil, err
	}
	if err := c.waitRunnerPolling(ctx, "runner-1"); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTails())
	}
	// knotless-run exec of the same workflow, one after each run through
	// the server, so that both see the same moment of a noisy host.
	wf := filepath.Join(".knotless", "workflows", "bench.yml")
	execCmd := func() *exec.Cmd {
		// Its work directory is under the cluster's, where Close finds the
		// agent of an exec cut short.
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "knotless-run"), "exec", wf,
			"--log-limit", res.LogLimit, "--work", filepath.Join(c.dir, "exec-work"))
		cmd.Dir = c.git
		cmd.SysProcAttr = killedWithParent()
		// SIGTERM lets exec stop its step and agent; SIGKILL after 5 s.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
		return cmd
	}
	var execRates []float64
	var rates []float64
	for i := range times {
		sha, err := c.commit(ctx, i)
		if err != nil {
			return nil, err
		}
		if err := c.push(ctx); err != nil {
			return nil, err
		}
		run, err := c.waitRunFinished(ctx, sha, 30*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("log run %d: %w\n%s", i, err, c.logTails())
		}
		if run.State != api.StateSucceeded || run.FinishedAt == nil || len(run.Steps) < 2 {
			return nil, fmt.Errorf("log run %d: run %d ended %s %s %s\n%s", i, run.ID, run.State, run.Reason, run.Message, c.logTails())
		}
		stored := run.Steps[1].LogSize
		if want := size + 2*dateLine; stored != want {
			return nil, fmt.Errorf("log run %d: the server holds %d bytes of step 1, want %d", i, stored, want)
		}
		start, err := c.stepStart(ctx, run.ID)
		if err != nil {
			return nil, err
		}
		end, err := c.stepEnd(ctx, run.ID, stored)
		if err != nil {
			return nil, err
		}
		total := run.FinishedAt.Sub(start)
		r := LogRun{Bytes: stored, StepMs: msf(end.Sub(start)), TotalMs: msf(total), MBps: float64(mb) / total.Seconds()}
		if err := c.checkLog(ctx, run.ID, size); err != nil {
			return nil, fmt.Errorf("log run %d: %w", i, err)
		}
		if err := c.waitWorkspaceGone(ctx, "runner-1", run.ID); err != nil {
			return nil, err
		}
		execTime, err := medianWall(ctx, 1, execCmd)
		if err != nil {
			return nil, fmt.Errorf("time knotless-run exec: %w", err)
		}
		r.ExecMs = msf(execTime)
		res.Runs = append(res.Runs, r)
		rates = append(rates, r.MBps)
		execRates = append(execRates, float64(mb)/execTime.Seconds())
		progress("log %d/%d: %d bytes stored, every one as printed; step ran %s, start → succeeded %s: %.1f MB/s; then knotless-run exec %s: %.1f MB/s",
			i+1, times, stored, ms(end.Sub(start)), ms(total), r.MBps, ms(execTime), float64(mb)/execTime.Seconds())
	}
	slices.Sort(rates)
	res.MedianMBps = median(rates)

	gen, err := medianWall(ctx, times, func() *exec.Cmd {
		return exec.CommandContext(ctx, "/bin/sh", "-c", fmt.Sprintf("yes '%s' | head -c %d >/dev/null", logLine, size))
	})
	if err != nil {
		return nil, fmt.Errorf("time the generator alone: %w", err)
	}
	res.GeneratorMBps = float64(mb) / gen.Seconds()
	slices.Sort(execRates)
	res.ExecMBps = median(execRates)
	res.Ratio = res.MedianMBps / res.ExecMBps
	progress("log references: generator alone %.1f MB/s, knotless-run exec %.1f MB/s; to the server %.2f× exec",
		res.GeneratorMBps, res.ExecMBps, res.Ratio)
	return res, nil
}

// dateLine is the length of what `date +%s%N` prints: 19 digits and a
// newline (until 2286).
const dateLine = 20

// checkLog reads step 1's whole log of run back from the server and checks
// that it is exactly what logScript(size) printed: a time, size bytes of
// logLine lines, a time.
func (c *cluster) checkLog(ctx context.Context, run, size int64) error {
	resp, err := c.admin.Do(ctx, http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {"1"}}, "", nil)
	if err != nil {
		return fmt.Errorf("read run %d's log: %w", run, err)
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	line := make([]byte, len(logLine)+1)
	checkDate := func(where string) error {
		s, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("run %d's log: %s time: %w", run, where, err)
		}
		if _, err := parseNanos(strings.TrimSpace(s)); err != nil || len(s) != dateLine {
			return fmt.Errorf("run %d's log: %s line is %q, want a time", run, where, s)
		}
		return nil
	}
	if err := checkDate("first"); err != nil {
		return err
	}
	want := logLine + "\n"
	for off := int64(0); off < size; off += int64(len(line)) {
		n := min(int64(len(line)), size-off)
		if _, err := io.ReadFull(r, line[:n]); err != nil {
			return fmt.Errorf("run %d's log: byte %d of the output: %w", run, off, err)
		}
		if string(line[:n]) != want[:n] {
			return fmt.Errorf("run %d's log differs from what the step printed within bytes %d-%d", run, off, off+n)
		}
	}
	if err := checkDate("last"); err != nil {
		return err
	}
	if n, _ := io.Copy(io.Discard, r); n != 0 {
		return fmt.Errorf("run %d's log has %d bytes more than the step printed", run, n)
	}
	return nil
}

// stepEnd reads the time step 1 of run printed as its last line; size is
// the step log's size.
func (c *cluster) stepEnd(ctx context.Context, run, size int64) (time.Time, error) {
	resp, err := c.admin.Do(ctx, http.MethodGet, api.MethodGetRunLog, url.Values{
		"run": {fmt.Sprint(run)}, "step": {"1"}, "offset": {fmt.Sprint(max(0, size-64))}}, "", nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the end of run %d's log: %w", run, err)
	}
	defer resp.Body.Close()
	tail, err := io.ReadAll(resp.Body)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the end of run %d's log: %w", run, err)
	}
	lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
	return parseNanos(lines[len(lines)-1])
}

// medianWall runs the command newCmd makes times times, its output into
// /dev/null, and returns the median wall time.
func medianWall(ctx context.Context, times int, newCmd func() *exec.Cmd) (time.Duration, error) {
	var ds []time.Duration
	for range times {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		cmd := newCmd()
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		cmd.Stdout, cmd.Stderr = devnull, devnull
		t0 := time.Now()
		err = cmd.Run()
		ds = append(ds, time.Since(t0))
		devnull.Close()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", cmd, err)
		}
	}
	return time.Duration(summarize(ds).Median * float64(time.Millisecond)), nil
}

// msf is d in milliseconds.
func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
