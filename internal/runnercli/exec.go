package runnercli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/runner"
)

const execLong = `exec runs the workflow FILE from the local checkout (the git work tree that
holds FILE, or the current directory) through the same code as a runner does,
and prints each step's log between step headers and footers, then a summary.

With the shell executor the steps run in the checkout itself, not in a copy:
files they create stay. With --executor kube they run in a job pod of their
own (the checkout copied in), which is deleted at the end with everything in it;
with --executor docker in a container of their own (the checkout bind-mounted,
not copied: files they create stay), removed at the end.
Steps end with exec: on SIGINT, SIGTERM, SIGHUP or a closed output pipe the run
is cancelled and cleaned up; if exec is killed outright, the shell executor's
step agent ends the step within a second, and a job pod's agent ends it once
no exec has been connected for 30 seconds (a job container's likewise, and the
engine then removes the container).
Secrets named with --secret are read from the environment variable of the same
name (a missing one is an error before anything runs), given to the steps
that ask for them byte for byte (as a server run gives them), and masked in
the output.

Exit status: 0 when the run succeeded, 1 when it failed, errored or was
cancelled, 2 when the command line was wrong.`

func newExec(g *globals, stdout io.Writer) *cobra.Command {
	var (
		work     string
		exf      *executorFlags
		secrets  []string
		logLimit = int64(runner.DefaultLogLimit)
		envs     = &envValue{}
		envPass  = &envPassValue{}
		matrix   = &envValue{}
	)
	cmd := &cobra.Command{
		Use:   "exec FILE [--executor shell|kube|docker] [--secret NAME]...",
		Short: "Run one workflow file locally, without a server",
		Long:  execLong,
		Example: `  knotless-run exec .knotless/workflows/ci.yml
  DEPLOY_TOKEN=$(cat token) knotless-run exec .knotless/workflows/deploy.yml --secret DEPLOY_TOKEN
  knotless-run exec ci.yml --env GOCACHE=$HOME/.cache/go-build
  knotless-run exec test.yml --matrix os=debian --matrix go=1.26
  knotless-run exec --executor kube --namespace ci --image golang:1.26 ci.yml
  DOCKER_HOST=unix:///run/docker.sock knotless-run exec --executor docker --image golang:1.26 ci.yml`,
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
				defer cleanup.RemoveAll(dir, log)
				work = dir
			}
			if err := os.MkdirAll(work, 0o700); err != nil {
				return fmt.Errorf("work directory: %w", err)
			}
			ex, err := exf.newExecutor(work, "exec", log, true)
			if err != nil {
				return err
			}
			// Any of these ends the run cleanly: the terminal went away
			// (SIGHUP) or the reader of the output did (a closed output
			// pipe, as in `exec ... | head`). A SIGKILL cannot be caught:
			// then the step agent notices that exec is gone and ends the
			// step.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			defer stop()
			ctx, stopPipe := cancelOnClosedOutput(ctx, stdout)
			defer stopPipe()
			env, missing := stepEnv(envPass, envs)
			if len(missing) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "knotless-run exec: --env-pass %v: not set in this environment; steps run without them\n", missing)
			}
			res, err := runner.ExecLocal(ctx, runner.LocalOptions{
				File: args[0], Secrets: secrets, Executor: ex, Out: stdout,
				LogLimit: logLimit, Env: env, Logger: log, Matrix: matrix.m,
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
	exf = addExecutorFlags(f, "where the run executes")
	f.StringArrayVar(&secrets, "secret", nil, "secret NAME to pass, value from the environment variable NAME (repeatable)")
	f.StringVar(&work, "work", "", "directory for the executor's files, among them the steps' HOME (default: a temporary one, removed)")
	f.Var(envflag.Size{P: &logLimit}, "log-limit", "most log bytes kept per step (e.g. 64Mi)")
	f.Var(envs, "env", "NAME=VALUE given to every step (repeatable; the workflow's env wins; not for secrets: not masked)")
	f.Var(matrix, "matrix", "NAME=VALUE of the matrix run to execute, for a workflow with a matrix (repeatable)")
	f.Var(envPass, "env-pass", envPassUsage)
	envflag.BindAs(f, "work", "KNOTLESS_WORK")
	envflag.BindAs(f, "log-limit", "KNOTLESS_LOG_LIMIT")
	envflag.BindAs(f, "env-pass", "KNOTLESS_ENV_PASS")
	return cmd
}

// cancelOnClosedOutput returns ctx cancelled when out (the process's
// stdout) is a pipe whose reader has gone. Go raises SIGPIPE, once a
// program asks for it, for a write to any broken pipe or socket: a step
// agent's exec stream that broke (its container ended) raised it too, and
// every such run read as cancelled by nobody. So a SIGPIPE cancels only
// when out itself is broken (poll: POLLERR or POLLHUP on its descriptor).
func cancelOnClosedOutput(ctx context.Context, out io.Writer) (context.Context, func()) {
	f, ok := out.(*os.File)
	if !ok {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				if outputGone(f) {
					cancel(errors.New("the reader of the output has gone"))
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// outputGone reports whether f is a pipe or socket whose other end has
// closed.
func outputGone(f *os.File) bool {
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLOUT}}
	if _, err := unix.Poll(fds, 0); err != nil {
		return false
	}
	return fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}
