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
type Options struct{}

// Name returns "shell".
func (*Options) Name() string { return Name }

// AddFlags adds no flag: the shell executor has no option of its own yet
// (a step's PATH is set with knotless-run's --env PATH=...).
func (*Options) AddFlags(*pflag.FlagSet) {}

// New returns a shell executor that keeps its sessions in Work/shell and
// runs each under the agent program setup.Agent (FindAgent when empty).
func (*Options) New(setup executor.Setup) (executor.Executor, error) {
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
	return New(Config{Dir: filepath.Join(setup.Work, Name), Agent: setup.Agent, Logger: setup.Logger, Ephemeral: setup.Ephemeral}), nil
}
