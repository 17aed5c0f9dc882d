package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	buildversion "knotless.dev/knotless/internal/version"
)

// requestTimeout bounds one ordinary API call; long polls add their wait.
const requestTimeout = 30 * time.Second

// App is one knotless process: its streams and environment. The zero
// values of the optional fields mean the real process's (os.Getenv, the
// current directory, a plain http.Client, time.Now).
type App struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string // nil: os.Getenv
	Dir    string              // working directory for relative paths; "": the process's
	HTTP   *http.Client        // nil: a client without a global timeout
	Now    func() time.Time    // nil: time.Now
	// IsTerminal says whether Stdout or Stderr is a terminal, where what
	// the CLI prints is made safe (see termSafe). nil: an *os.File that
	// is a terminal.
	IsTerminal func(io.Writer) bool
}

// Main runs the knotless command with args (without the program name) and
// returns the exit code; SIGINT and SIGTERM cancel it. cmd/knotless calls it.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &App{Stdin: stdin, Stdout: stdout, Stderr: stderr}
	return a.Run(ctx, args)
}

// Run executes one command line (without the program name) and returns its
// exit code (ExitOK, ExitFailed, ...). Errors are printed to a.Stderr as one
// line starting with "knotless: ".
func (a *App) Run(ctx context.Context, args []string) int {
	s := &session{app: a}
	if a.Getenv == nil {
		s.getenv = os.Getenv
	} else {
		s.getenv = a.Getenv
	}
	s.now = time.Now
	if a.Now != nil {
		s.now = a.Now
	}
	root := s.newRoot()
	root.SetArgs(args)
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	err := root.ExecuteContext(ctx)
	s.flushOutput()
	if err == nil && s.helpErr != nil {
		err = s.helpErr
	}
	if err != nil && ctx.Err() != nil && s.ranCommand {
		err = context.Canceled
	}
	code, msg := classify(err, errContext{server: s.server, repo: s.repo, ranCommand: s.ranCommand, login: s.loggingIn})
	if msg != "" {
		var ee *exitError
		if code == ExitUsage && !s.ranCommand && !errors.As(err, &ee) {
			msg += " (see knotless --help)"
		}
		fmt.Fprintf(s.stderr(), "knotless: %s\n", msg)
		s.flushOutput()
	}
	return code
}

// session is the state of one Run: global flags and the API client.
type session struct {
	app        *App
	getenv     func(string) string
	now        func() time.Time
	ranCommand bool  // a command's RunE started (errors before are usage errors)
	helpErr    error // --help was asked of a group with an unknown subcommand

	configFlag string
	jsonOut    bool
	raw        bool // run logs --raw: stdout byte for byte, terminal or not

	out, errOut *termSafe // stdout and stderr when they are terminals, once asked

	server    string // set once a client is made, for messages
	repo      string // the repository the command is about, once known, for messages
	loggingIn bool   // the command is login: a refused token is the one just given
	client    *api.Client
}

// stdout is where commands print: the real stdout, made safe (termSafe)
// when it is a terminal unless --raw.
func (s *session) stdout() io.Writer {
	if s.out != nil {
		return s.out
	}
	if !s.raw && s.app.Stdout != nil && s.app.isTerminal(s.app.Stdout) {
		s.out = newTermSafe(s.app.Stdout)
		return s.out
	}
	return s.app.Stdout
}

// stderr is stdout's counterpart for messages (never --raw).
func (s *session) stderr() io.Writer {
	if s.errOut != nil {
		return s.errOut
	}
	if s.app.Stderr != nil && s.app.isTerminal(s.app.Stderr) {
		s.errOut = newTermSafe(s.app.Stderr)
		return s.errOut
	}
	return s.app.Stderr
}

// flushOutput writes out what the terminal filters still hold.
func (s *session) flushOutput() {
	if s.out != nil {
		s.out.Flush()
	}
	if s.errOut != nil {
		s.errOut.Flush()
	}
}

func (s *session) warn(msg string) { fmt.Fprintln(s.stderr(), "knotless: "+msg) }

// configPath is the config file in use.
func (s *session) configPath() (string, error) {
	p, err := ConfigPath(s.configFlag, s.getenv)
	if err != nil {
		return "", &exitError{code: ExitUsage, msg: err.Error(), err: err}
	}
	return p, nil
}

// api returns a client for the configured server and token, or
// errNotLoggedIn.
func (s *session) api() (*api.Client, error) {
	if s.client != nil {
		return s.client, nil
	}
	path, err := s.configPath()
	if err != nil {
		return nil, err
	}
	c, err := resolveConfig(path, s.getenv, s.warn)
	if err != nil {
		return nil, err
	}
	if c.Server == "" || c.Token == "" {
		return nil, errNotLoggedIn
	}
	if err := api.CheckServerURL(c.Server); err != nil {
		from := path + " (fix it with knotless login --server URL)"
		if s.getenv(EnvServer) != "" {
			from = EnvServer
		}
		return nil, usageErrorf("%v (server URL from %s)", err, from)
	}
	if i := strings.IndexFunc(c.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		from := path + " (fix it with knotless login)"
		if s.getenv(EnvToken) != "" {
			from = EnvToken
		}
		// Said without the token: it may be a real one with a line
		// beside it, e.g. a file that holds a command's whole output.
		return nil, usageErrorf("the API token from %s is not one token: it has a space or a line break at character %d (a file with more than the token in it?)", from, i+1)
	}
	s.client = s.newClient(c.Server, c.Token)
	return s.client, nil
}

func (s *session) newClient(server, token string) *api.Client {
	s.server = server
	return &api.Client{
		BaseURL:   server,
		HTTP:      s.app.HTTP,
		Auth:      api.BearerToken(token),
		UserAgent: "knotless-cli/" + version(),
	}
}

// query calls a query method with the ordinary request timeout.
func (s *session) query(ctx context.Context, nsid string, params url.Values, out any) error {
	c, err := s.api()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return c.Query(ctx, nsid, params, out)
}

// procedure calls a procedure method with the ordinary request timeout.
func (s *session) procedure(ctx context.Context, nsid string, in, out any) error {
	c, err := s.api()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return c.Procedure(ctx, nsid, in, out)
}

func version() string { return buildversion.Version }

func (s *session) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "knotless",
		Short: "Client of a Knotless CI server: repositories, runs, logs, secrets, runners",
		Long: `knotless is the command-line client of a Knotless CI server: repositories,
pipelines, runs and their logs, secrets and runners. ` + "`knotless workflow lint`" + ` checks
workflow files locally and needs no server.

Log in once with ` + "`knotless login --server URL`" + `; the server URL and the API token
are kept in $XDG_CONFIG_HOME/knotless/config.json (default
~/.config/knotless/config.json, mode 0600; --config FILE overrides the path).

Environment:
  KNOTLESS_SERVER  server URL, overrides the config file
  KNOTLESS_TOKEN   API token, overrides the config file
  KNOTLESS_REPO    default for --repo (OWNER/NAME, or NAME for your own)

Output is a human-readable table by default; --json prints the API's JSON
objects for scripts.

` + exitCodesHelp,
		Example: `  knotless login --server https://ci.example.com --token-file ~/token
  knotless repo create app
  knotless secret set DEPLOY_KEY --repo alice/app < key.txt
  knotless run logs --repo alice/app --latest -f
  knotless workflow lint`,
		Version:       version(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	// cobra answers `GROUP UNKNOWN --help` with GROUP's help and exit 0,
	// which hides the typo: make it the usage error it is without --help.
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if c.HasParent() && c.HasSubCommands() {
			if rest := c.Flags().Args(); len(rest) > 0 {
				s.helpErr = unknownSubcommand(c, rest[0])
				return
			}
		}
		defaultHelp(c, args)
	})
	pf := root.PersistentFlags()
	pf.StringVar(&s.configFlag, "config", "", "config file (default $XDG_CONFIG_HOME/knotless/config.json)")
	pf.BoolVar(&s.jsonOut, "json", false, "print JSON (the API's objects) instead of tables")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErrorf("%v (see %s --help)", err, c.CommandPath())
	})

	root.AddCommand(
		s.loginCmd(),
		s.whoamiCmd(),
		s.accountCmd(),
		s.tokenCmd(),
		s.repoCmd(),
		s.scheduleCmd(),
		s.runCmd(),
		s.secretCmd(),
		s.runnerCmd(),
		s.workflowCmd(),
	)
	markRunning(root, s)
	return root
}

// markRunning wraps every command's RunE so that errors it returns are told
// apart from cobra's own usage errors, which come before it.
func markRunning(c *cobra.Command, s *session) {
	if c.RunE != nil {
		inner := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			s.ranCommand = true
			return inner(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		markRunning(sub, s)
	}
}

// group makes a command that only holds subcommands: without arguments it
// prints its help, with an unknown one it is a usage error.
func group(use, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return unknownSubcommand(cmd, args[0])
		},
	}
}

// unknownSubcommand is the usage error for `GROUP NAME` when GROUP has no
// subcommand NAME, with the closest names as suggestions.
func unknownSubcommand(group *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, group.CommandPath())
	group.SuggestionsMinimumDistance = 2
	if sug := group.SuggestionsFor(name); len(sug) > 0 {
		msg += "; did you mean " + strings.Join(sug, " or ") + "?"
	}
	return usageErrorf("%s (see %s --help)", msg, group.CommandPath())
}

// exactArgs is cobra.ExactArgs with a usage error that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s, got %d argument(s) (see %s --help)", cmd.CommandPath(), names, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q (see %s --help)", cmd.CommandPath(), args[0], cmd.CommandPath())
	}
	return nil
}
