// Command knotless-run is the Knotless runner: `login` registers a runner
// identity with a server, `run` claims and executes runs, `exec` runs one
// workflow locally with no server. All of the work is in internal/runner;
// this file turns flags (with KNOTLESS_* environment fallbacks) into calls.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/runner"
	"knotless.dev/knotless/internal/version"
	"knotless.dev/knotless/internal/workflow"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // a failed, errored or cancelled run; an operational error
	exitUsage = 2 // bad flags or arguments; nothing ran
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError marks an error in how the program was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitError carries an exit code chosen by a command that already said why.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// Main runs the command line args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	var ee exitError
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, runner.ErrNotRegistered), errors.Is(err, runner.ErrSuperseded):
		return exitFail // the runner logged what to do
	case strings.HasPrefix(err.Error(), "unknown command"):
		fmt.Fprintf(stderr, "knotless-run: %s (see knotless-run --help)\n", unknownCommand(err.Error()))
		return exitUsage
	case errors.As(err, &ue), errors.Is(err, runner.ErrUsage):
		fmt.Fprintf(stderr, "knotless-run: %s\n", message(err))
		return exitUsage
	}
	fmt.Fprintf(stderr, "knotless-run: %s\n", message(err))
	return exitFail
}

// unknownCommand folds cobra's several-line "unknown command ... Did you
// mean this?" onto one line: `unknown command "rn" for "knotless-run"; did
// you mean run?`.
func unknownCommand(msg string) string {
	head, rest, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	var sug []string
	for _, l := range strings.Split(rest, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "Did you mean") {
			sug = append(sug, l)
		}
	}
	if len(sug) > 0 {
		head += "; did you mean " + strings.Join(sug, " or ") + "?"
	}
	return head
}

// message is err's text with a server's answer in it reduced to the
// server's message: no XRPC error name in front ("Conflict: ...") and no
// trailing repeat of it (": conflict").
func message(err error) string {
	full := err.Error()
	var ae *api.Error
	if !errors.As(err, &ae) || strings.TrimSpace(ae.Message) == "" {
		return full
	}
	m := strings.TrimSpace(ae.Message)
	var words strings.Builder
	for i, r := range ae.Name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			words.WriteByte(' ')
		}
		words.WriteRune(r)
	}
	if name := strings.ToLower(words.String()); name != "" {
		m = strings.TrimSuffix(m, ": "+name)
	}
	return strings.Replace(full, ae.Error(), m, 1)
}

type globals struct {
	logLevel string
	stderr   io.Writer
}

func (g *globals) logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: lvl}))
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stderr: stderr}
	root := &cobra.Command{
		Use:   "knotless-run",
		Short: "The Knotless CI runner",
		Long: `knotless-run executes Knotless CI runs.

  knotless-run login   register this runner with a server (once)
  knotless-run run     claim runs from the server and execute them
  knotless-run exec    run one workflow file locally, without a server

Every flag can also be set by the environment variable named in its help.

Exit status: 0 success, 1 a failed run or an operational error, 2 a wrong
command line.`,
		Example: `  knotless-run login --server https://ci.example.com --repo alice/app --name builder-1 --state runner.json
  knotless-run run --state runner.json --executor shell --work /var/lib/knotless-run
  knotless-run exec .knotless/workflows/ci.yml`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnv(cmd)
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error"+envNote("KNOTLESS_LOG_LEVEL"))
	envFlag(root.PersistentFlags(), "log-level", "KNOTLESS_LOG_LEVEL")
	root.AddCommand(newLogin(g, stdout), newRun(g), newExec(g, stdout))
	return root
}

// envFlag records that flag name falls back to environment variable env.
func envFlag(fs *pflag.FlagSet, name, env string) {
	_ = fs.SetAnnotation(name, "env", []string{env})
}

func envNote(env string) string { return " [env " + env + "]" }

// applyEnv sets every flag the command line left alone from its
// environment variable, when that is set.
func applyEnv(cmd *cobra.Command) error {
	var err error
	visit := func(f *pflag.Flag) {
		envs := f.Annotations["env"]
		if err != nil || f.Changed || len(envs) == 0 {
			return
		}
		if v, ok := os.LookupEnv(envs[0]); ok && v != "" {
			if e := f.Value.Set(v); e != nil {
				err = usagef("%s=%q: %v", envs[0], v, e)
			}
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return err
}

func newLogin(g *globals, stdout io.Writer) *cobra.Command {
	var o runner.LoginOptions
	var labels string
	cmd := &cobra.Command{
		Use:   "login --server URL --repo OWNER/REPO --name NAME --state FILE [--labels a,b]",
		Short: "Register this runner with a server and write its state file",
		Long: `login makes a new runner identity (a P-256 key pair; its DID is the key's did:key),
registers it with the server for one repository as pending, and writes the state
file (JSON, mode 0600, holding the private key: keep it out of job environments).
An owner of the repository must then approve the runner; login prints the
command, with the runner's DID so that only this registration is approved.

A runner that was removed on the server logs in again with --force (a new
identity, approved anew).`,
		Example: `  knotless-run login --server https://ci.example.com --repo alice/app \
      --name builder-1 --labels linux,big --state /etc/knotless/runner.json
  KNOTLESS_SERVER=http://127.0.0.1:8080 knotless-run login --repo alice/app --name dev --state runner.json
  knotless-run login --force --server https://ci.example.com --repo alice/app --name builder-1 --state runner.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Server == "" || o.Repo == "" || o.Name == "" || o.State == "" {
				return usagef("login needs --server, --repo, --name and --state")
			}
			if err := runner.CheckServerURL(strings.TrimRight(strings.TrimSpace(o.Server), "/")); err != nil {
				if !cmd.Flags().Changed("server") {
					return usagef("%v (server URL from KNOTLESS_SERVER)", err)
				}
				return err
			}
			if labels != "" {
				o.Labels = strings.Split(labels, ",")
			}
			st, err := runner.Login(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Registered runner %s for %s (%s); it is pending approval.\n", st.Name, st.Repo, st.DID)
			fmt.Fprintf(stdout, "State written to %s (mode 0600).\n", o.State)
			fmt.Fprintf(stdout, "An owner of %s must approve it with:\n\n  %s\n\n", st.Repo, st.ApproveCommand())
			fmt.Fprintf(stdout, "Then start it: knotless-run run --state %s --executor shell --work DIR\n", o.State)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Server, "server", "", "server URL, e.g. https://ci.example.com"+envNote("KNOTLESS_SERVER"))
	f.StringVar(&o.Repo, "repo", "", "repository the runner serves, OWNER/NAME")
	f.StringVar(&o.Name, "name", "", "runner name, unique in the repository")
	f.StringVar(&labels, "labels", "", "comma-separated labels the runner advertises (workflows' runners: must all match)")
	f.StringVar(&o.State, "state", "", "state file to write"+envNote("KNOTLESS_STATE"))
	f.BoolVar(&o.Force, "force", false, "replace an existing state file (its identity is lost)")
	envFlag(f, "server", "KNOTLESS_SERVER")
	envFlag(f, "state", "KNOTLESS_STATE")
	return cmd
}

// sizeValue is a byte size flag ("64Mi", "1000000").
type sizeValue int64

func (s *sizeValue) String() string { return strconv.FormatInt(int64(*s), 10) }
func (s *sizeValue) Type() string   { return "bytes" }
func (s *sizeValue) Set(v string) error {
	n, err := workflow.ParseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

func newExecutor(name, work string, log *slog.Logger) (executor.Executor, error) {
	switch name {
	case shell.Name:
		return shell.New(shell.Config{Dir: filepath.Join(work, "shell"), Agent: os.Getenv("KNOTLESS_AGENT"), Logger: log}), nil
	}
	return nil, usagef("unknown executor %q (available: %s)", name, shell.Name)
}

func newRun(g *globals) *cobra.Command {
	var (
		statePath, execName, work string
		cfg                       runner.Config
		logLimit                  = sizeValue(runner.DefaultLogLimit)
		envs                      = &envValue{}
	)
	cmd := &cobra.Command{
		Use:   "run --state FILE --executor shell --work DIR",
		Short: "Claim runs from the server and execute them",
		Long: `run long-polls the server for runs this runner qualifies for and executes up to
--capacity of them at once: it fetches the commit into a bare mirror under DIR
(only what is missing), checks it out into a fresh workspace, executes the steps
with the executor, and ships masked logs, step states and the result. Logs and
results are spooled under DIR first, so nothing is lost while the server is
unreachable; a later start delivers what an earlier process left.

Started before its approval, the runner waits and retries. On SIGTERM or SIGINT
it stops claiming, lets running runs finish for up to --stop-wait, then cancels
them (reason runner-stopped), delivers its spools and exits 0. A second signal
cancels running runs at once.

Work directory layout:
  DIR/mirrors/OWNER/NAME.git   bare mirror per repository
  DIR/runs/<run>/              workspace and HOME of a run (removed after it)
  DIR/spool/<run>/             logs and results not yet delivered
  DIR/shell/                   the shell executor's private files

Every run gets a fresh HOME (DIR/runs/<run>/home), so tool caches start
cold; --env points tools at a cache the runs share, e.g. GOCACHE.

If the server no longer knows the runner (it was removed), run logs what
to do, cancels its running runs and exits 1.`,
		Example: `  knotless-run run --state /etc/knotless/runner.json --executor shell --work /var/lib/knotless-run
  knotless-run run --state runner.json --work work --capacity 2 --stop-wait 2m
  knotless-run run --state runner.json --work work \
      --env GOCACHE=/var/cache/knotless/go-build --env GOMODCACHE=/var/cache/knotless/gomod`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if statePath == "" || work == "" {
				return usagef("run needs --state FILE and --work DIR")
			}
			log := g.logger()
			ex, err := newExecutor(execName, work, log)
			if err != nil {
				return err
			}
			st, err := runner.LoadState(statePath)
			if err != nil {
				return err
			}
			cfg.State, cfg.StatePath, cfg.Executor, cfg.WorkDir, cfg.Logger = st, statePath, ex, work, log
			cfg.LogLimit = int64(logLimit)
			cfg.Env = envs.m
			r, err := runner.New(cfg)
			if err != nil {
				return err
			}
			// The first SIGTERM/SIGINT stops gracefully, a second one
			// cancels running runs at once.
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
			defer signal.Stop(sigs)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				sig := <-sigs
				log.Info("signal received: stopping (claiming no more runs; a second signal cancels running runs at once)",
					"signal", sig.String(), "stop_wait", cfg.StopWait)
				cancel()
				<-sigs
				r.StopNow()
			}()
			return r.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&statePath, "state", "", "state file written by login"+envNote("KNOTLESS_STATE"))
	f.StringVar(&execName, "executor", shell.Name, "where runs execute: shell"+envNote("KNOTLESS_EXECUTOR"))
	f.StringVar(&work, "work", "", "work directory for mirrors, workspaces and spools"+envNote("KNOTLESS_WORK"))
	f.IntVar(&cfg.Capacity, "capacity", runner.DefaultCapacity, "runs executed at once"+envNote("KNOTLESS_CAPACITY"))
	f.DurationVar(&cfg.StopWait, "stop-wait", runner.DefaultStopWait, "on SIGTERM, how long running runs may finish before they are cancelled (a second signal cancels at once)"+envNote("KNOTLESS_STOP_WAIT"))
	f.Var(&logLimit, "log-limit", "most log bytes kept per step (e.g. 64Mi); past it a marker line, the step keeps running"+envNote("KNOTLESS_LOG_LIMIT"))
	f.Lookup("log-limit").DefValue = "64Mi"
	f.Var(envs, "env", "NAME=VALUE given to every step (repeatable; the workflow's env wins; not for secrets: not masked)")
	for flag, env := range map[string]string{"state": "KNOTLESS_STATE", "executor": "KNOTLESS_EXECUTOR", "work": "KNOTLESS_WORK",
		"capacity": "KNOTLESS_CAPACITY", "stop-wait": "KNOTLESS_STOP_WAIT", "log-limit": "KNOTLESS_LOG_LIMIT"} {
		envFlag(f, flag, env)
	}
	return cmd
}

func newExec(g *globals, stdout io.Writer) *cobra.Command {
	var (
		execName, work string
		secrets        []string
		logLimit       = sizeValue(runner.DefaultLogLimit)
		envs           = &envValue{}
	)
	cmd := &cobra.Command{
		Use:   "exec FILE [--executor shell] [--secret NAME]...",
		Short: "Run one workflow file locally, without a server",
		Long: `exec runs the workflow FILE from the local checkout (the git work tree that
holds FILE, or the current directory) through the same code as a runner does,
and prints each step's log between step headers and footers, then a summary.

The steps run in the checkout itself, not in a copy: files they create stay.
Secrets named with --secret are read from the environment variable of the same
name (a missing one is an error before anything runs) and masked in the output.

Exit status: 0 when the run succeeded, 1 when it failed, errored or was
cancelled, 2 when the command line was wrong.`,
		Example: `  knotless-run exec .knotless/workflows/ci.yml
  DEPLOY_TOKEN=$(cat token) knotless-run exec .knotless/workflows/deploy.yml --secret DEPLOY_TOKEN
  knotless-run exec ci.yml --env GOCACHE=$HOME/.cache/go-build`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("exec takes one workflow FILE, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("log-level") && os.Getenv("KNOTLESS_LOG_LEVEL") == "" {
				g.logLevel = "warn" // the framed output already tells each event
			}
			log := g.logger()
			if work == "" {
				dir, err := os.MkdirTemp("", "knotless-exec-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				work = dir
			}
			if err := os.MkdirAll(work, 0o700); err != nil {
				return fmt.Errorf("work directory: %w", err)
			}
			ex, err := newExecutor(execName, work, log)
			if err != nil {
				return err
			}
			home, err := os.MkdirTemp(work, "home-")
			if err != nil {
				return fmt.Errorf("work directory: %w", err)
			}
			defer os.RemoveAll(home)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			res, err := runner.ExecLocal(ctx, runner.LocalOptions{
				File: args[0], Secrets: secrets, Home: home, Executor: ex, Out: stdout,
				LogLimit: int64(logLimit), Env: envs.m, Logger: log,
			})
			if err != nil {
				return err
			}
			if res.State != api.StateSucceeded {
				return exitError{exitFail}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&execName, "executor", shell.Name, "where the run executes: shell"+envNote("KNOTLESS_EXECUTOR"))
	f.StringArrayVar(&secrets, "secret", nil, "secret NAME to pass, value from the environment variable NAME (repeatable)")
	f.StringVar(&work, "work", "", "directory for HOME and the executor's files (default: a temporary one, removed)"+envNote("KNOTLESS_WORK"))
	f.Var(&logLimit, "log-limit", "most log bytes kept per step (e.g. 64Mi)"+envNote("KNOTLESS_LOG_LIMIT"))
	f.Lookup("log-limit").DefValue = "64Mi"
	f.Var(envs, "env", "NAME=VALUE given to every step (repeatable; the workflow's env wins; not for secrets: not masked)")
	envFlag(f, "executor", "KNOTLESS_EXECUTOR")
	envFlag(f, "work", "KNOTLESS_WORK")
	envFlag(f, "log-limit", "KNOTLESS_LOG_LIMIT")
	return cmd
}

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	return nil
}

// envValue is a repeatable NAME=VALUE flag.
type envValue struct{ m map[string]string }

func (e *envValue) String() string { return "" }
func (e *envValue) Type() string   { return "NAME=VALUE" }
func (e *envValue) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" || strings.ContainsAny(name, " \t\x00") {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	if e.m == nil {
		e.m = map[string]string{}
	}
	e.m[name] = value
	return nil
}
