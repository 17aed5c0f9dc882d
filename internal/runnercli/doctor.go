package runnercli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/runner"
)

func newDoctor(g *globals, stdout io.Writer) *cobra.Command {
	var (
		statePath   string
		skipMachine bool
		exf         *executorFlags
	)
	cmd := &cobra.Command{
		Use:   "doctor --executor NAME [--state FILE] [--skip-machine]",
		Short: "Check that this runner can run jobs here, one line per check",
		Long: `doctor checks what a runner needs and prints one line per check, "ok" or
"FAIL" with what was found and the fix. It exits 1 when any check failed.

With --state it checks that the server answers at the state file's URL and
accepts the runner's credential (without starting a session: a running
runner with the same state file is not disturbed).

Then the executor's own checks. For --executor kube, with the same client
configuration and namespace as run (--kubeconfig, --namespace, in a pod its
ServiceAccount): the API server; each permission of the runner's Role
(SelfSubjectAccessReview), and that Secrets are NOT readable; that the
namespace enforces Pod Security "restricted" (a pod that breaks it must be
refused, in a dry run); the RuntimeClass of job pods (--runtime-class: that
it exists, when the credential may read it); that a NetworkPolicy selects job
pods (when the credential may list them); the runner's own pod and the job
pods' owner (--owner). Unless --skip-machine it starts a job pod as a run
would (--image, --runtime-class: a node whose container runtime lacks the
class's handler fails here, naming it and the fix; else the kernel the steps
see is reported), runs a step with a test secret sent over the stream,
checks the exit code,
checks from inside the pod that DNS works while the API server, the node
and another pod do not answer (the NetworkPolicy is enforced, not only
present), and removes the pod.

For --executor docker, with the engine run would use (DOCKER_HOST): the
engine answers (its version and API version); --runtime is one it has; its
data disk has --disk-floor free; the job network (--network, or the
runner's own, made if missing, with its rules that keep the host and
link-local addresses unreachable). Unless --skip-machine it starts a test
container of --image as a run would, runs a step with a test secret sent
over the stream, and removes the container.`,
		Example: `  knotless-run doctor --executor kube --image golang:1.26 --state /var/lib/knotless-run/state/runner.json
  knotless-run doctor --executor kube --kubeconfig ~/.kube/config --namespace ci --skip-machine
  knotless-run doctor --executor docker --image golang:1.26`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger()
			if f := cmd.Flag("log-level"); f == nil || !f.Changed {
				log = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			failed := false
			report := func(c executor.Check) {
				failed = failed || !c.OK
				fmt.Fprintln(stdout, checkLine(c))
			}
			name := "doctor"
			if statePath != "" {
				if st := checkServer(ctx, statePath, report); st != nil {
					name = st.Name
				}
			}
			work, err := os.MkdirTemp("", "knotless-doctor-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			ex, err := exf.newExecutor(work, name, log, true)
			if err != nil {
				var ue usageError
				if errors.As(err, &ue) {
					return err
				}
				report(executor.Check{Name: "executor " + exf.name, Detail: message(err), Fix: "fix what the message names; knotless-run doctor --help"})
				return exitError{exitFail}
			}
			if c, ok := ex.(io.Closer); ok {
				defer c.Close()
			}
			d, ok := ex.(executor.Doctor)
			if !ok {
				report(executor.Check{Name: "executor " + exf.name, OK: true, Detail: "has no checks of its own"})
			} else {
				d.Doctor(ctx, !skipMachine, report)
			}
			if ctx.Err() != nil {
				fmt.Fprintln(g.stderr, "knotless-run doctor: interrupted")
				return exitError{exitFail}
			}
			if failed {
				return exitError{exitFail}
			}
			return nil
		},
	}
	f := cmd.Flags()
	exf = addExecutorFlags(f, "the executor to check")
	f.StringVar(&statePath, "state", "", "state file written by login: also check the server and the credential")
	f.BoolVar(&skipMachine, "skip-machine", false, "do not start a test job environment (permissions and configuration only)")
	envflag.BindAs(f, "state", "KNOTLESS_STATE")
	return cmd
}

// checkLine is one check as doctor prints it:
//
//	ok    NAME: DETAIL
//	FAIL  NAME: DETAIL; fix: FIX
func checkLine(c executor.Check) string {
	s := "ok    " + c.Name
	if !c.OK {
		s = "FAIL  " + c.Name
	}
	if c.Detail != "" {
		s += ": " + c.Detail
	}
	if !c.OK && c.Fix != "" {
		s += "; fix: " + c.Fix
	}
	return s
}

// checkServer reads the state file and checks that its server answers (and
// is the server the runner registered with) and accepts the runner's
// credential. A signed runner call without a session is refused for want
// of one (SessionRequired) only after the signature and the approval were
// checked, so no session is started: a runner running with this state
// keeps its own. It returns the state when it could be read.
func checkServer(ctx context.Context, path string, report func(executor.Check)) *runner.State {
	st, err := runner.LoadState(path)
	if err != nil {
		report(executor.Check{Name: "state file", Detail: err.Error(), Fix: "give the file knotless-run login wrote (--state)"})
		return nil
	}
	report(executor.Check{Name: "state file", OK: true, Detail: fmt.Sprintf("runner %s of %s (%s)", st.Name, st.Repo, st.DID)})
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	anon := st.Client(nil)
	anon.Auth = nil
	var desc api.DescribeServerOutput
	if err := anon.Query(cctx, api.MethodDescribeServer, nil, &desc); err != nil {
		report(executor.Check{Name: "server reachable", Detail: fmt.Sprintf("%s: %v", st.Server, err),
			Fix: "check the server URL in the state file and that this machine reaches it (the runner dials out; nothing dials in)"})
		return st
	}
	if desc.DID != st.ServerDID {
		report(executor.Check{Name: "server reachable", Detail: fmt.Sprintf("%s answers as %s, but the runner registered with %s", st.Server, desc.DID, st.ServerDID),
			Fix: "the URL now reaches another server: log in again there (" + st.LoginCommand(path) + ")"})
		return st
	}
	report(executor.Check{Name: "server reachable", OK: true, Detail: fmt.Sprintf("%s (knotless-server %s)", st.Server, desc.Version)})
	_, err = api.NewRunnerClient(st.Client(nil)).Heartbeat(cctx, 0)
	var ae *api.Error
	switch {
	case err == nil, api.IsError(err, api.ErrSessionRequired):
		report(executor.Check{Name: "credential accepted", OK: true, Detail: "runner " + st.Name + " is approved"})
	case api.IsError(err, api.ErrNotApproved):
		report(executor.Check{Name: "credential accepted", Detail: "the runner is not approved yet", Fix: st.ApproveCommand()})
	case errors.As(err, &ae) && ae.Status == 401:
		report(executor.Check{Name: "credential accepted", Detail: message(err), Fix: "the server does not know this runner (removed?): " + st.LoginCommand(path)})
	default:
		report(executor.Check{Name: "credential accepted", Detail: message(err), Fix: "check the server's log"})
	}
	return st
}
