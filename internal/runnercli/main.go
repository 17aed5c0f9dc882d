package runnercli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/runner"
	"knotless.dev/knotless/internal/version"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // a failed, errored or cancelled run; an operational error
	exitUsage = 2 // bad flags or arguments; nothing ran
)

// usageError marks an error in how the program was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitError carries an exit code chosen by a command that already said why.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// Main runs the knotless-run command line args (without the program name)
// and returns the exit code: 0, 1 or 2 as `knotless-run --help` says.
// cmd/knotless-run calls it.
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
	case errors.Is(err, runner.ErrNotRegistered):
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
  knotless-run doctor  check that this runner can run jobs here (ok / FAIL and the fix)

Every flag can also be set by the environment variable named in its help.
A flag whose help says "only with --executor NAME" is used only with that
executor; with another one it is ignored (with a warning when it was given
on the command line rather than in the environment).

Exit status: 0 success, 1 a failed run or an operational error, 2 a wrong
command line.`,
		Example: `  knotless-run login --server https://ci.example.com --repo alice/app --name builder-1 --state runner.json
  knotless-run run --state runner.json --executor shell --work /var/lib/knotless-run
  knotless-run exec .knotless/workflows/ci.yml`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return envflag.Apply(cmd.Flags(), cmd.InheritedFlags())
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	envflag.BindAs(root.PersistentFlags(), "log-level", "KNOTLESS_LOG_LEVEL")
	root.AddCommand(newLogin(g, stdout), newRun(g), newExec(g, stdout), newDoctor(g, stdout))
	return root
}
