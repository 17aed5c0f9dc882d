package shell

import (
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// Options are the shell executor's part of knotless-run's command line.
type Options struct {
	user string // --user
}

var _ executor.Options = (*Options)(nil)

// Name returns "shell".
func (*Options) Name() string { return Name }

// UsesJob reports false: the shell executor runs no image.
func (*Options) UsesJob() bool { return false }

// AddFlags adds --user (a step's PATH is set with knotless-run's --env
// PATH=...).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.user, "user", "", "run steps as this unprivileged user (name or UID) with its groups, HOME and the workspace its own; the runner must run as root (default: steps run as the runner's user)")
}

// New returns a shell executor that keeps its sessions in Work/shell and
// runs each under the agent program setup.Agent (agentenv.FindAgent when
// empty). Errors: no such agent, an unknown --user.
func (o *Options) New(setup executor.Setup) (executor.Executor, error) {
	cfg := Config{Config: agentenv.ConfigOf(setup), Dir: filepath.Join(setup.Work, Name)}
	var err error
	if cfg.Agent, err = agentenv.HostAgent(setup.Agent); err != nil {
		return nil, err
	}
	if o.user != "" {
		u, err := LookupStepUser(o.user, os.Geteuid())
		if err != nil {
			return nil, err
		}
		cfg.User = u
	}
	return New(cfg), nil
}
