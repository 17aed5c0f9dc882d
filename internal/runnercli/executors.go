package runnercli

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/executor/shell"
)

// executors are the executors knotless-run offers, the default first; each
// `run` and `exec` gets fresh options of every one. An executor is added
// with one line here.
var executors = []func() ExecutorOptions{
	func() ExecutorOptions { return &shell.Options{} },
	func() ExecutorOptions { return &kube.Options{} },
	func() ExecutorOptions { return &docker.Options{} },
}

// ExecutorOptions is one executor's part of the command line: its flags and
// how to make it from their values.
type ExecutorOptions interface {
	// Name is the executor's name as --executor spells it.
	Name() string
	// AddFlags adds the executor's flags to fs (e.g. --namespace); no two
	// executors may add the same name. The command adds to each flag's
	// help its environment variable (KNOTLESS_ and the name in upper
	// case, '-' as '_') and that only --executor <Name> uses it.
	AddFlags(fs *pflag.FlagSet)
	// New makes the executor from the flags' values, after they were
	// parsed, and from what the runner's own flags say (work directory,
	// absolute or relative to the current one; agent program; logger).
	// Errors say what to fix.
	New(setup executor.Setup) (executor.Executor, error)
}

// executorFlags are the --executor flag and every executor's own flags of
// one command.
type executorFlags struct {
	fs    *pflag.FlagSet
	name  string
	agent string // --agent
	opts  []ExecutorOptions
	owner map[string][]string // flag name → the executors that have it
	// own are each executor's own flag sets: a flag several executors
	// share by name (--image, --cpus) is on fs once, and its value is
	// copied to the chosen executor's own flag (sharedFlags).
	own map[string]*pflag.FlagSet
}

// addExecutorFlags adds --executor (help: "<what>: shell, ..."), --agent
// and every executor's flags to fs.
func addExecutorFlags(fs *pflag.FlagSet, what string) *executorFlags {
	e := &executorFlags{fs: fs, owner: map[string][]string{}, own: map[string]*pflag.FlagSet{}}
	var names []string
	for _, newOpts := range executors {
		o := newOpts()
		e.opts = append(e.opts, o)
		names = append(names, o.Name())
	}
	fs.StringVar(&e.name, "executor", names[0], what+": "+strings.Join(names, ", ")+envNote("KNOTLESS_EXECUTOR"))
	envFlag(fs, "executor", "KNOTLESS_EXECUTOR")
	fs.StringVar(&e.agent, "agent", "", "the step agent program, knotless-agent (default: the one beside knotless-run, else the one in PATH)"+envNote("KNOTLESS_AGENT"))
	envFlag(fs, "agent", "KNOTLESS_AGENT")
	for _, o := range e.opts {
		own := pflag.NewFlagSet(o.Name(), pflag.ContinueOnError)
		o.AddFlags(own)
		e.own[o.Name()] = own
		own.VisitAll(func(f *pflag.Flag) {
			env := "KNOTLESS_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			if others, dup := e.owner[f.Name]; dup {
				// Executors may share a flag that means the same to each
				// (kube's and docker's --image, --cpus, --memory,
				// --run-as): same type, same default.
				first := fs.Lookup(f.Name)
				if first.Value.Type() != f.Value.Type() || first.DefValue != f.DefValue {
					panic(fmt.Sprintf("executor %s adds flag --%s, which %s has already with another type or default", o.Name(), f.Name, strings.Join(others, ", ")))
				}
				e.owner[f.Name] = append(others, o.Name())
				first.Usage = strings.TrimSuffix(first.Usage, envNote(env))
				first.Usage = strings.Replace(first.Usage, " (only with --executor "+strings.Join(others, ", ")+")", " (--executor "+strings.Join(others, ", ")+")", 1)
				first.Usage += "; " + f.Usage + " (--executor " + o.Name() + ")" + envNote(env)
				return
			}
			if fs.Lookup(f.Name) != nil {
				panic(fmt.Sprintf("executor %s adds flag --%s, which %s has already", o.Name(), f.Name, "the command"))
			}
			f.Usage += " (only with --executor " + o.Name() + ")" + envNote(env)
			fs.AddFlag(f)
			envFlag(fs, f.Name, env)
			e.owner[f.Name] = []string{o.Name()}
		})
	}
	return e
}

// newExecutor makes the executor --executor names from its flags' values.
// Flags of other executors given on the command line are ignored, with a
// warning (from the environment they are ignored silently: one environment
// may serve runners of several executors).
func (e *executorFlags) newExecutor(work, runner string, log *slog.Logger, ephemeral bool) (executor.Executor, error) {
	setup := executor.Setup{Work: work, Runner: runner, Agent: e.agent, Logger: log, Ephemeral: ephemeral}
	var chosen ExecutorOptions
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
			log.Warn(fmt.Sprintf("--%s is a flag of the %s executor: --executor %s ignores it", f.Name, strings.Join(owners, " and "), e.name))
		}
	})
	if err := e.sharedFlags(); err != nil {
		return nil, err
	}
	return chosen.New(setup)
}

// sharedFlags copies the value of every flag the chosen executor shares
// with an executor before it (which owns the flag on the command line) to
// the chosen executor's own flag.
func (e *executorFlags) sharedFlags() error {
	var err error
	e.own[e.name].VisitAll(func(f *pflag.Flag) {
		if top := e.fs.Lookup(f.Name); err == nil && top != nil && top != f {
			if serr := f.Value.Set(top.Value.String()); serr != nil {
				err = usagef("--%s %q: %v", f.Name, top.Value.String(), serr)
			}
		}
	})
	return err
}
