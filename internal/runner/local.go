package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/runlog"
	"knotless.dev/knotless/internal/workflow"
)

// ErrUsage is matched (errors.Is) by errors in how `exec` was called: a
// missing workflow file or secret. Nothing ran; the exit code is 2.
var ErrUsage = errors.New("usage error")

type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// LocalOptions configures ExecLocal.
type LocalOptions struct {
	// File is the workflow file to run.
	File string
	// Secrets are secret names; each value is read from the environment
	// variable of the same name.
	Secrets []string
	// Executor runs the steps.
	Executor executor.Executor
	// Out receives the framed, masked log.
	Out io.Writer
	// LogLimit caps each step's log (DefaultLogLimit).
	LogLimit int64
	// Env holds extra variables for every step (--env), as Job.Env.
	Env map[string]string
	// Matrix picks the run of a workflow with a matrix (--matrix
	// NAME=VALUE): the one run whose values include all of these; it may
	// be empty when the matrix makes one run.
	Matrix map[string]string
	Logger *slog.Logger
}

// LocalCheckout finds the checkout a workflow file belongs to: the git
// work tree that contains it, or else the current directory.
func LocalCheckout(file string) (string, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", usagef("%s: %v", file, err)
	}
	out, err := exec.Command("git", "-C", filepath.Dir(abs), "rev-parse", "--show-toplevel").Output()
	if err == nil {
		if root := strings.TrimSpace(string(out)); root != "" {
			return root, nil
		}
	}
	return os.Getwd()
}

// ExecLocal runs one workflow file with no server, through the same
// Execute as `knotless-run run`. The steps run in the checkout itself (the
// git work tree holding File, or the current directory): files they create
// stay there. Output goes to opts.Out framed by runlog's step headers and
// footers and ends with runlog.RunSummary; every secret value is masked.
// Errors wrapping ErrUsage mean nothing ran (a missing file or secret).
func ExecLocal(ctx context.Context, opts LocalOptions) (Result, error) {
	src, err := os.ReadFile(opts.File)
	if err != nil {
		return Result{}, usagef("read workflow: %v", err)
	}
	secrets := map[string]string{}
	for _, name := range opts.Secrets {
		if !workflow.ValidEnvName(name) {
			return Result{}, usagef("--secret %q is not a variable name", name)
		}
		v, ok := os.LookupEnv(name)
		if !ok {
			return Result{}, usagef("secret %s: set the environment variable %s to its value", name, name)
		}
		secrets[name] = v
	}
	root, err := LocalCheckout(opts.File)
	if err != nil {
		return Result{}, err
	}
	rel := opts.File
	if abs, err := filepath.Abs(opts.File); err == nil {
		if r, err := filepath.Rel(root, abs); err == nil && !strings.HasPrefix(r, "..") {
			rel = filepath.ToSlash(r)
		}
	}
	name := strings.TrimSuffix(filepath.Base(rel), filepath.Ext(rel))
	var matrix []api.MatrixValue
	if runs, err := workflow.Expand(rel, src); err == nil {
		wf, err := pickRun(runs, opts.Matrix)
		if err != nil {
			return Result{}, err
		}
		name = wf.Name
		for _, v := range wf.Combo {
			matrix = append(matrix, api.MatrixValue{Name: v.Name, Value: v.Value})
		}
	} else if len(opts.Matrix) > 0 {
		return Result{}, usagef("--matrix: %s does not parse, so it has no runs to pick from (knotless workflow lint %s)", rel, rel)
	}
	gitOut := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	job := Job{
		Repo:            "local/" + filepath.Base(root),
		Ref:             gitOut("symbolic-ref", "-q", "HEAD"),
		SHA:             gitOut("rev-parse", "-q", "--verify", "HEAD"),
		WorkTreeChanges: countLines(gitOut("status", "--porcelain", "--untracked-files=all")),
		WorkflowPath:    rel,
		WorkflowSource:  src,
		ID:              fmt.Sprintf("exec-%d", os.Getpid()),
		Workspace:       root,
		Env:             opts.Env,
		Secrets:         secrets,
		Labels:          map[string]string{"knotless.dev/exec": fmt.Sprint(os.Getpid())},
		LogLimit:        opts.LogLimit,
		Logger:          opts.Logger,
		Matrix:          matrix,
	}
	rep := &ConsoleReporter{Out: opts.Out, Workflow: name}
	return Execute(ctx, job, opts.Executor, rep), nil
}

// ConsoleReporter prints a run for a person as it happens: each step's log
// between runlog.StepHeader and runlog.StepFooter, then runlog.RunSummary.
// Safe for concurrent use.
type ConsoleReporter struct {
	Out      io.Writer
	Workflow string // name shown in the summary
	Run      int64  // run ID shown in the summary

	mu      sync.Mutex
	total   int
	names   map[int]string
	current int  // section whose bytes were printed last; -1 none
	last    byte // last byte printed
}

func (c *ConsoleReporter) init() {
	if c.names == nil {
		c.names = map[int]string{}
		c.current = -1
		c.last = '\n'
	}
}

// enter makes step the section being printed, printing its header and
// ending the previous section's last line. A section entered again after
// another one (the setup log's cleanup lines, a detached step's log at the
// run's end) gets its header again. c.mu is held.
func (c *ConsoleReporter) enter(step int) {
	c.init()
	if c.current == step {
		return
	}
	c.endLine()
	c.current = step
	io.WriteString(c.Out, runlog.StepHeader(step, c.total, c.names[step]))
}

func (c *ConsoleReporter) endLine() {
	if c.last != '\n' {
		io.WriteString(c.Out, "\n")
		c.last = '\n'
	}
}

// Log implements Reporter.
func (c *ConsoleReporter) Log(step int) (logship.LogFile, error) {
	return consoleLog{c: c, step: step}, nil
}

type consoleLog struct {
	c    *ConsoleReporter
	step int
}

func (l consoleLog) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	l.c.enter(l.step)
	l.c.last = p[len(p)-1]
	return l.c.Out.Write(p)
}

func (consoleLog) Close() error { return nil }

// FreeReserve reports false: the console keeps no reserve.
func (consoleLog) FreeReserve() bool { return false }

// Step implements Reporter.
func (c *ConsoleReporter) Step(u StepUpdate) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	if _, ok := c.names[u.Step]; !ok && u.Step != api.SetupStep {
		c.total++
	}
	c.names[u.Step] = u.Name
	switch u.State {
	case api.StepPending:
		return nil
	case api.StepRunning:
		c.enter(u.Step)
		return nil
	}
	c.enter(u.Step)
	c.endLine()
	st := api.Step{Index: u.Step, Name: u.Name, State: u.State, ExitCode: u.ExitCode, Reason: u.Reason}
	if u.Step == api.SetupStep {
		st.State = runlog.SetupState(u.State, u.RunState) // as `knotless run logs` prints it
	}
	// No duration, as `knotless run logs` has none to show: the two print
	// a run the same way.
	_, err := io.WriteString(c.Out, runlog.StepFooter(st, 0))
	c.current = -1
	return err
}

// Done implements Reporter.
func (c *ConsoleReporter) Done(r Result) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	c.endLine()
	var b bytes.Buffer
	b.WriteString(runlog.RunSummary(api.Run{
		ID: c.Run, Workflow: c.Workflow, State: r.State, Reason: r.Reason, Message: r.Message, ExitCode: r.ExitCode,
	}))
	_, err := c.Out.Write(b.Bytes())
	return err
}

// pickRun is the run of runs (a workflow's, workflow.Expand) whose matrix
// values include every one of want: exactly one must; with want empty,
// the workflow's only run.
func pickRun(runs []*workflow.Workflow, want map[string]string) (*workflow.Workflow, error) {
	if len(runs) == 1 && len(want) == 0 {
		return runs[0], nil
	}
	if runs[0].Matrix == nil {
		return nil, usagef("--matrix: the workflow has no matrix")
	}
	var found []*workflow.Workflow
	var all []string
	for _, r := range runs {
		all = append(all, r.Combo.String())
		ok := true
		for k, v := range want {
			if got, has := r.Combo.Get(k); !has || got != v {
				ok = false
			}
		}
		if ok {
			found = append(found, r)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	what := "matches none"
	if len(found) > 1 {
		what = fmt.Sprintf("matches %d", len(found))
	}
	if len(want) == 0 {
		what = fmt.Sprintf("makes %d runs", len(runs))
	}
	return nil, usagef("the workflow's matrix %s: pick one run with --matrix NAME=VALUE (repeatable); its runs: %s", what, strings.Join(all, "; "))
}

// countLines is how many lines s holds (0 for "").
func countLines(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, "\n") + 1
}
