package shell

import (
	"log/slog"
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

// New returns a shell executor that keeps its sessions in work/shell.
func (*Options) New(work string, log *slog.Logger) (executor.Executor, error) {
	return New(Config{Dir: filepath.Join(work, Name), Logger: log}), nil
}
