package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/runlog"
)

// Following logs.
const (
	// logWait is the long-poll wait (seconds) of getLog while a step runs.
	logWait = 10
	// setupWait is the long-poll wait (seconds) of the setup log, and of a
	// running step that has sent no byte yet: it may be a detached step
	// (detach: true), whose log arrives only when it ends, and whose
	// following steps must not wait a whole logWait to be shown.
	setupWait = 2
	// pollInterval spaces calls that found nothing new.
	pollInterval = time.Second
	// followRetryFor is how long following keeps retrying while the server
	// is unreachable or failing (e.g. restarting) before giving up.
	followRetryFor = 2 * time.Minute
)

// runLogsOptions is `knotless run logs ID` or `knotless run logs --repo R
// --latest`. The *Set fields say a flag was given at all (cobra knows,
// the options do not): --step 0 is the setup log, not "every step", and
// --after and --timeout are refused without --latest even at their
// defaults. --raw is the session's (it decides how stdout is written).
type runLogsOptions struct {
	Repo       string        // --repo, with --latest
	Follow     bool          // -f
	Step       int           // --step, if StepSet
	Latest     bool          // --latest
	After      int64         // --after: a pipeline id, with --latest
	Timeout    time.Duration // --timeout, with --latest
	StepSet    bool
	AfterSet   bool
	TimeoutSet bool
	args       []string
	json       bool // --json, from the session: refused
}

func (s *session) runLogsCmd() *cobra.Command {
	o := &runLogsOptions{}
	cmd := &cobra.Command{
		Use:   "logs (ID | --repo R --latest) [-f] [--step N]",
		Short: "Print or follow a run's logs, step by step",
		Long: `Print the logs of a run: the setup log (checkout, workflow errors, runner
messages) and then each step, framed by a header and a footer with the step's
state and exit code, and a summary line.

Step output is printed byte for byte when stdout is not a terminal (a pipe,
a file), and with --raw. On a terminal, what others wrote (step output,
names, messages) cannot drive it: colours (SGR sequences, ESC [ ... m),
newlines, tabs and CR LF pass; every other control character or escape
sequence is shown escaped, e.g. \x1b]0;title\x07, so that no step can set
the window title or the clipboard, clear the screen or print over the
footer.

-f follows the run while it is going: it waits for new output, and ends when
the run is final and every log is done. Then the exit code is 0 if the run
succeeded and 1 otherwise.

--step N prints (or follows) only step N; 0 is the setup log.

--latest takes every run of the newest pipeline of --repo, one after the
other. With -f, or with --after PIPELINE, it first waits (up to --timeout)
for a pipeline newer than PIPELINE to appear: use it right after a git push.`,
		Example: `  knotless run logs 42
  knotless run logs 42 -f
  knotless run logs 42 --step 2
  git push knotless HEAD:main && knotless run logs --repo alice/app --latest -f
  knotless run logs --repo alice/app --latest -f --after 17 --timeout 2m`,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			o.StepSet, o.AfterSet, o.TimeoutSet = f.Changed("step"), f.Changed("after"), f.Changed("timeout")
			return execute(cmd.Context(), s, o, args)
		},
	}
	s.addRepoFlag(cmd, &o.Repo)
	f := cmd.Flags()
	f.BoolVarP(&o.Follow, "follow", "f", false, "follow until the run ends; exit 1 unless it succeeded")
	f.BoolVar(&s.raw, "raw", false, "print step output byte for byte also on a terminal (control sequences act on it)")
	f.IntVar(&o.Step, "step", 0, "only this step (0: the setup log)")
	f.BoolVar(&o.Latest, "latest", false, "every run of the newest pipeline of --repo")
	f.Int64Var(&o.After, "after", 0, "with --latest: wait for a pipeline newer than this id")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "with --latest: how long to wait for the pipeline to appear")
	return cmd
}

func (o *runLogsOptions) complete(_ context.Context, s *session, args []string) error {
	o.args, o.json = args, s.jsonOut
	return nil
}

// step is the one step to print, -1 for all.
func (o *runLogsOptions) step() int {
	if !o.StepSet {
		return -1
	}
	return o.Step
}

// validate refuses a negative --step, --json, and anything but one run ID
// or --latest with the flags that go with each (usage errors, in the
// order the command has always told them).
func (o *runLogsOptions) validate() error {
	if o.StepSet && o.Step < 0 {
		return usageErrorf("--step %d: want 0 (setup) or a step number", o.Step)
	}
	if o.json {
		return usageErrorf("run logs prints raw logs and has no --json; use knotless run show ID --json for the run's data")
	}
	switch {
	case len(o.args) > 1:
		return usageErrorf("run logs takes one run ID, got %d arguments", len(o.args))
	case len(o.args) == 1 && o.Latest:
		return usageErrorf("give a run ID or --latest, not both")
	case len(o.args) == 0 && !o.Latest:
		return usageErrorf("run logs needs a run ID, or --repo R --latest (see knotless run logs --help)")
	case !o.Latest && (o.AfterSet || o.TimeoutSet):
		return usageErrorf("--after and --timeout go with --latest")
	case o.Latest && o.StepSet:
		return usageErrorf("--step goes with a run ID, not --latest")
	}
	if !o.Latest {
		_, err := parseRunID(o.args[0])
		return err
	}
	return nil
}

func (o *runLogsOptions) run(ctx context.Context, s *session) error {
	if o.Latest {
		return o.runLatest(ctx, s)
	}
	id, err := parseRunID(o.args[0])
	if err != nil {
		return err
	}
	if !o.Follow {
		return s.printLogs(ctx, id, o.step())
	}
	_, ok, err := s.followRun(ctx, id, o.step())
	if err != nil {
		return err
	}
	if !ok {
		return errSilentFailure
	}
	return nil
}

// runLatest prints or follows every run of the newest pipeline of the
// repository; with -f or --after it first waits for that pipeline.
func (o *runLogsOptions) runLatest(ctx context.Context, s *session) error {
	repo, err := s.repoArg(ctx, o.Repo, true)
	if err != nil {
		return err
	}
	var pid int64
	if o.Follow || o.After > 0 {
		pid, err = s.waitPipeline(ctx, repo, o.After, o.Timeout)
	} else {
		pid, err = s.latestPipeline(ctx, repo)
		if err == nil && pid == 0 {
			err = &exitError{code: ExitNotFound, msg: "no pipelines yet in " + repo + ": push a commit, or use -f to wait for one"}
		}
	}
	if err != nil {
		return err
	}
	runs, err := s.pipelineRuns(ctx, repo, pid)
	if err != nil {
		return err
	}
	if o.Follow {
		return s.followRuns(ctx, runs)
	}
	for i, r := range runs {
		if len(runs) > 1 {
			if i > 0 {
				fmt.Fprintln(s.stdout())
			}
			fmt.Fprint(s.stdout(), runBanner(r))
		}
		if err := s.printLogs(ctx, r.ID, -1); err != nil {
			return err
		}
	}
	return nil
}

func runBanner(r api.Run) string {
	return fmt.Sprintf("══ run %d: %s (%s at %s %s) ══\n", r.ID, r.Workflow, r.WorkflowPath, shortRef(r.Ref), shortSHA(r.SHA))
}

// waitPipeline polls the runs of repo until a pipeline newer than after
// appears (any pipeline when after is 0), at most timeout.
func (s *session) waitPipeline(ctx context.Context, repo string, after int64, timeout time.Duration) (int64, error) {
	deadline := s.now().Add(timeout)
	told := false
	for {
		pid, err := s.latestPipeline(ctx, repo)
		if err != nil {
			return 0, err
		}
		if pid > after {
			return pid, nil
		}
		if !s.now().Before(deadline) {
			what := "no pipeline"
			if after > 0 {
				what = fmt.Sprintf("no pipeline newer than %d", after)
			}
			return 0, failf("%s appeared in %s within %s: check that the push reached the server and that a workflow matches it (knotless run list --repo %s)", what, repo, timeout, repo)
		}
		if !told {
			fmt.Fprintf(s.stderr(), "Waiting for a pipeline of %s…\n", repo)
			told = true
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return 0, err
		}
	}
}

// followRuns follows runs one after the other, and the retry of each that
// is retried (a new run, followed after the others), and fails (exit 1,
// silently: the summaries say why) unless every run's last attempt
// succeeded.
func (s *session) followRuns(ctx context.Context, runs []api.Run) error {
	runs = append([]api.Run(nil), runs...)
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID < runs[j].ID })
	seen := map[int64]bool{}
	for _, r := range runs {
		seen[r.ID] = true
	}
	var final []api.Run
	allOK := true
	for i := 0; i < len(runs); i++ {
		r := runs[i]
		if len(runs) > 1 {
			if i > 0 {
				fmt.Fprintln(s.stdout())
			}
			fmt.Fprint(s.stdout(), runBanner(r))
		}
		fr, ok, err := s.followRun(ctx, r.ID, -1)
		if err != nil {
			return err
		}
		final = append(final, fr)
		if fr.RetriedBy != 0 {
			if !seen[fr.RetriedBy] {
				next, err := s.getRun(ctx, fr.RetriedBy)
				if err != nil {
					return err
				}
				seen[next.ID] = true
				runs = append(runs, next)
			}
			continue // its last attempt decides
		}
		allOK = allOK && ok
	}
	if len(final) > 1 {
		n, current := 0, 0
		fmt.Fprintln(s.stdout())
		for _, r := range final {
			if r.RetriedBy == 0 {
				current++
				if r.State == api.StateSucceeded {
					n++
				}
			}
			fmt.Fprint(s.stdout(), runlog.RunSummary(r))
		}
		fmt.Fprintf(s.stdout(), "pipeline %d: %d of %d runs succeeded\n", final[0].Pipeline, n, current)
	}
	if !allOK {
		return errSilentFailure
	}
	return nil
}

// sortedSteps returns the run's steps by index, with a setup step (index 0)
// first even when the server lists none.
func sortedSteps(r api.Run) []api.Step {
	steps := append([]api.Step(nil), r.Steps...)
	sort.Slice(steps, func(i, j int) bool { return steps[i].Index < steps[j].Index })
	if len(steps) == 0 || steps[0].Index != api.SetupStep {
		setup := api.Step{Index: api.SetupStep, Name: "setup", State: runlog.SetupDone}
		if !api.IsFinal(r.State) {
			setup.State = api.StepRunning
		}
		steps = append([]api.Step{setup}, steps...)
	}
	return steps
}

// stepOf finds step index in r (the synthetic setup step included).
func stepOf(r api.Run, index int) (api.Step, bool) {
	for _, st := range sortedSteps(r) {
		if st.Index == index {
			return st, true
		}
	}
	return api.Step{}, false
}

// workflowSteps counts the run's workflow steps (index ≥ 1).
func workflowSteps(r api.Run) int {
	n := 0
	for _, st := range r.Steps {
		if st.Index > api.SetupStep {
			n++
		}
	}
	return n
}

// stepDone reports whether a step's state is one it never leaves.
func stepDone(state string) bool { return api.StepIsFinal(state) }

// printLogs prints the logs of run id as they are now: the setup log (when
// not empty), every step framed by runlog headers and footers, and the
// summary line. only ≥ 0 prints just that step, without the summary.
func (s *session) printLogs(ctx context.Context, id int64, only int) error {
	run, err := s.getRun(ctx, id)
	if err != nil {
		return err
	}
	total := workflowSteps(run)
	found := false
	for _, st := range sortedSteps(run) {
		if only >= 0 && st.Index != only {
			continue
		}
		found = true
		sw := &stepWriter{w: s.stdout()}
		// The header goes out with the first byte (the setup log's only
		// then), else after the log was read: never before a refusal
		// such as LogsExpired.
		sw.header = runlog.StepHeader(st.Index, total, st.Name)
		var offset int64
		for {
			n, size, _, err := s.fetchLog(ctx, sw, id, st.Index, offset, 0)
			if api.IsError(err, api.ErrNotFound) && st.Index == api.SetupStep {
				break
			}
			if ae := (*api.Error)(nil); errors.As(err, &ae) && ae.Name == api.ErrLogsExpired {
				return ae // the server's sentence says it all: which run, when
			}
			if err != nil {
				return err
			}
			offset += n
			if n == 0 || size < 0 || offset >= size {
				break
			}
		}
		force := st.Index != api.SetupStep || only >= 0
		if force && sw.header != "" { // an empty log still gets its header
			io.WriteString(s.stdout(), sw.header)
			sw.header = ""
		}
		s.endStep(sw, st, run.State, force)
	}
	if !found {
		return noStepError(id, only, total)
	}
	if only < 0 {
		fmt.Fprint(s.stdout(), runlog.RunSummary(run))
	}
	return nil
}

// noStepError is the answer to --step N for a run without step N.
func noStepError(id int64, step, total int) error {
	return &exitError{code: ExitNotFound, msg: fmt.Sprintf("run %d has no step %d (it has %d %s; 0 is the setup log)",
		id, step, total, plural(total, "step", "steps"))}
}

// endStep ends a step's output with a newline when it lacks one, and prints
// its footer when its header was printed (or force). runState is the run's
// state, which the setup log's footer shows when setup ended the run.
func (s *session) endStep(sw *stepWriter, st api.Step, runState string, force bool) {
	if sw.wrote && sw.last != '\n' {
		io.WriteString(s.stdout(), "\n")
	}
	if sw.header == "" || force {
		if st.Index == api.SetupStep {
			st.State = runlog.SetupState(st.State, runState)
		}
		io.WriteString(s.stdout(), runlog.StepFooter(st, stepDuration(st)))
	}
}

// stepDuration is how long a step ran, as its runner measured it; 0 when
// the server knows no start or end (pending, skipped, an older runner).
func stepDuration(st api.Step) time.Duration {
	if st.DurationMS != nil {
		return time.Duration(*st.DurationMS) * time.Millisecond
	}
	return 0
}

// stepWriter passes a step's log bytes through, writing header before the
// first byte, and remembers the last byte written.
type stepWriter struct {
	w      io.Writer
	header string // written before the first byte, then cleared
	wrote  bool
	last   byte
}

func (sw *stepWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if sw.header != "" {
		if _, err := io.WriteString(sw.w, sw.header); err != nil {
			return 0, err
		}
		sw.header = ""
	}
	n, err := sw.w.Write(p)
	if n > 0 {
		sw.wrote, sw.last = true, p[n-1]
	}
	return n, err
}

// fetchLog copies the log of step of run id from offset to w, waiting up
// to wait seconds for bytes when there are none yet. It returns how many
// bytes it copied, the log's stored size (-1 when the server did not say),
// and whether the log is done. The response must start within
// requestTimeout+wait and may pause at most requestTimeout between reads.
func (s *session) fetchLog(ctx context.Context, w io.Writer, id int64, step int, offset int64, wait int) (n, size int64, done bool, err error) {
	c, err := s.api()
	if err != nil {
		return 0, -1, false, err
	}
	p := url.Values{
		"run":    {strconv.FormatInt(id, 10)},
		"step":   {strconv.Itoa(step)},
		"offset": {strconv.FormatInt(offset, 10)},
	}
	if wait > 0 {
		p.Set("wait", strconv.Itoa(wait))
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(requestTimeout+time.Duration(wait)*time.Second, cancel)
	defer timer.Stop()
	resp, err := c.Do(rctx, http.MethodGet, api.MethodGetRunLog, p, "", nil)
	if err != nil {
		return 0, -1, false, timeoutErr(ctx, rctx, fmt.Sprintf("get log of run %d step %d", id, step), err)
	}
	defer resp.Body.Close()
	size = -1
	if v := resp.Header.Get(api.LogSizeHeader); v != "" {
		if sz, perr := strconv.ParseInt(v, 10, 64); perr == nil {
			size = sz
		}
	}
	done = resp.Header.Get(api.LogDoneHeader) == "true"
	timer.Reset(requestTimeout)
	n, err = io.Copy(w, &idleReader{r: resp.Body, timer: timer})
	if err != nil {
		if ctx.Err() != nil {
			return n, size, false, ctx.Err()
		}
		return n, size, false, fmt.Errorf("read log of run %d step %d: %w: %v", id, step, errTransfer, err)
	}
	return n, size, done, nil
}

// timeoutErr tells a request cancelled by its own timer (a timeout, worth
// retrying) from one cancelled by the caller.
func timeoutErr(parent, req context.Context, what string, err error) error {
	if parent.Err() == nil && req.Err() != nil {
		return fmt.Errorf("%s: %w", what, errTimedOut)
	}
	return fmt.Errorf("%s: %w", what, err)
}

var errTimedOut = errors.New("the server did not answer in time")

// idleReader resets timer on every read, so a transfer may take long as
// long as bytes keep coming.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	ir.timer.Reset(requestTimeout)
	return n, err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
