package runnercli

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/executor/shell"
)

// executors are the executors knotless-run offers, the default first; each
// `run`, `exec` and `doctor` gets fresh options of every one. An executor
// is added with one line here.
var executors = []func() executor.Options{
	func() executor.Options { return &shell.Options{} },
	func() executor.Options { return &kube.Options{} },
	func() executor.Options { return &docker.Options{} },
}

// executorFlags are the --executor flag, --agent, the shared job flags and
// every executor's own flags of one command.
type executorFlags struct {
	fs    *pflag.FlagSet
	name  string
	agent string // --agent
	job   executor.JobFlags
	opts  []executor.Options
	// capacity is the runner's --capacity, for Setup.Capacity (run only).
	capacity int
	owner    map[string][]string // flag name → the executors that read it
	// observer, when set, is told what the executor does (metrics).
	observer executor.Observer
}

// addExecutorFlags adds --executor (help: "<what>: shell, ..."), --agent,
// the job flags (executor.JobFlags, once, naming the executors that read
// them) and every executor's own flags to fs. Two executors adding one
// flag name is a programming error: it panics.
func addExecutorFlags(fs *pflag.FlagSet, what string) *executorFlags {
	e := &executorFlags{fs: fs, owner: map[string][]string{}}
	var names, jobUsers []string
	for _, newOpts := range executors {
		o := newOpts()
		e.opts = append(e.opts, o)
		names = append(names, o.Name())
		if o.UsesJob() {
			jobUsers = append(jobUsers, o.Name())
		}
	}
	fs.StringVar(&e.name, "executor", names[0], what+": "+strings.Join(names, ", "))
	envflag.BindAs(fs, "executor", "KNOTLESS_EXECUTOR")
	fs.StringVar(&e.agent, "agent", "", "the step agent program, knotless-agent (default: the one beside knotless-run, else the one in PATH)")
	envflag.BindAs(fs, "agent", "KNOTLESS_AGENT")
	if len(jobUsers) > 0 {
		e.job.AddFlags(fs, strings.Join(jobUsers, ", "))
		for _, name := range executor.JobFlagNames {
			e.owner[name] = jobUsers
			envflag.Bind(fs, name)
		}
	}
	for _, o := range e.opts {
		own := pflag.NewFlagSet(o.Name(), pflag.ContinueOnError)
		o.AddFlags(own)
		own.VisitAll(func(f *pflag.Flag) {
			if fs.Lookup(f.Name) != nil {
				panic(fmt.Sprintf("executor %s adds flag --%s, which the command or another executor has already", o.Name(), f.Name))
			}
			f.Usage += " (only with --executor " + o.Name() + ")"
			fs.AddFlag(f)
			e.owner[f.Name] = []string{o.Name()}
			envflag.Bind(fs, f.Name)
		})
	}
	return e
}

// newExecutor makes the executor --executor names from its flags' values.
// Flags of other executors given on the command line are ignored, with a
// warning (from the environment they are ignored silently: one environment
// may serve runners of several executors).
func (e *executorFlags) newExecutor(work, runner string, log *slog.Logger, ephemeral bool) (executor.Executor, error) {
	setup := executor.Setup{Work: work, Runner: runner, Agent: e.agent, Logger: log, Ephemeral: ephemeral, Observer: e.observer}
	var chosen executor.Options
	var names []string
	for _, o := range e.opts {
		names = append(names, o.Name())
		if o.Name() == e.name {
			chosen = o
		}
	}
	if chosen == nil {
		return nil, usagef("unknown executor %q (available: %s)", e.name, strings.Join(names, ", "))
	}
	e.fs.Visit(func(f *pflag.Flag) { // the flags set on the command line
		if owners, ok := e.owner[f.Name]; ok && !slices.Contains(owners, e.name) {
			log.Warn(fmt.Sprintf("--%s is a flag of the %s: --executor %s ignores it", f.Name, executorsNamed(owners), e.name))
		}
	})
	if chosen.UsesJob() {
		job, err := e.job.Job()
		if err != nil {
			return nil, usagef("%v", err)
		}
		setup.Job = job
	}
	return chosen.New(setup)
}

// executorsNamed is "the kube executor" or "the kube and docker
// executors" (the article is the caller's).
func executorsNamed(names []string) string {
	if len(names) == 1 {
		return names[0] + " executor"
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " executors"
}
