package shell

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/executor"
)

// Options are the shell executor's part of knotless-run's command line
// (runnercli.ExecutorOptions).
type Options struct {
	user string // --user
}

// Name returns "shell".
func (*Options) Name() string { return Name }

// AddFlags adds --user (a step's PATH is set with knotless-run's --env
// PATH=...).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.user, "user", "", "run steps as this unprivileged user (name or UID) with its groups, HOME and the workspace its own; the runner must run as root (default: steps run as the runner's user)")
}

// New returns a shell executor that keeps its sessions in Work/shell and
// runs each under the agent program setup.Agent (FindAgent when empty).
func (o *Options) New(setup executor.Setup) (executor.Executor, error) {
	if setup.Agent == "" {
		if _, err := FindAgent(); err != nil {
			return nil, err
		}
	} else if fi, err := os.Stat(setup.Agent); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		if err == nil {
			err = errors.New("not an executable file")
		}
		return nil, fmt.Errorf("--agent %s: %v: give the path of knotless-agent from the same release as knotless-run", setup.Agent, err)
	}
	cfg := Config{Dir: filepath.Join(setup.Work, Name), Agent: setup.Agent, Logger: setup.Logger, Ephemeral: setup.Ephemeral}
	if o.user != "" {
		u, err := LookupStepUser(o.user, os.Geteuid())
		if err != nil {
			return nil, err
		}
		cfg.User = u
	}
	return New(cfg), nil
}
