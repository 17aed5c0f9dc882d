// Command knotless-server is the Knotless control plane: accounts,
// repositories over git smart HTTP, pipelines and runs, runners, secrets,
// logs and the XRPC API. Flags map onto server.Config, and --database
// chooses the store it is handed (store.go); everything else is in
// internal/server.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	_ "time/tzdata" // IANA zones of on.schedule on hosts without zoneinfo

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/version"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the server could not start or failed while running
	exitUsage = 2 // a mistake on the command line or in KNOTLESS_* variables
)

func main() {
	os.Exit(execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a mistake in how the program was invoked: it exits 2 and
// points at --help.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// execute runs the command line args and returns the exit code; errors go
// to stderr as one line, usage errors followed by a pointer to --help.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newCommand()
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.ExecuteContext(ctx)
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "knotless-server: %v\nsee knotless-server --help\n", err)
		return exitUsage
	default:
		fmt.Fprintln(stderr, "knotless-server:", err)
		return exitError
	}
}

// serverOptions are knotless-server's flags and what it does with them
// (kubectl's pattern: newCommand only binds the flags; complete and run
// are callable without cobra).
type serverOptions struct {
	cfg                server.Config
	retention          server.Retention
	objects            objectStoreOptions
	database, logLevel string
}

const serverLong = `knotless-server runs the Knotless control plane: the XRPC API under /xrpc/,
git repositories at /OWNER/NAME.git, pipelines, runs, runners, secrets and logs,
and the web pages at / (sign in with an account API token; Pipelines at
/OWNER/NAME, Runners at /OWNER/NAME/-/runners, Usage at /OWNER/NAME/-/usage,
a run at /-/runs/ID).

On first start it creates the data directory, an "admin" account, and writes
the admin's API token to DATA/admin.token (mode 0600). While it runs,
DATA/server.url holds the URL it answers at (handy with --listen 127.0.0.1:0),
and DATA/.lock keeps a second knotless-server off the same data directory.

With --release-dir DIR (the dist directory of make release) it also serves
that release's files to anyone at /-/download/FILE, so runner pods in a
cluster fetch knotless-run and knotless-agent from it
(KNOTLESS_DOWNLOAD_URL=URL/-/download; they check every file's SHA-256).

Every flag can also be set with the environment variable named after it,
e.g. KNOTLESS_DATA for --data; a flag on the command line wins.

Exit status: 0 after a clean stop (SIGINT or SIGTERM), 1 when the server
could not start or failed, 2 for a mistake in flags or KNOTLESS_* variables.`

const serverExample = `  # Try it on this machine: data in ./knotless-data, API at http://127.0.0.1:8080
  knotless-server
  knotless login --server http://127.0.0.1:8080 --token-file knotless-data/admin.token

  # Serve a team: listen on every interface, give clients the public URL
  knotless-server --data /var/lib/knotless --listen 0.0.0.0:8080 --url https://ci.example.com

  # Scripts and tests: any free port, read the URL the server answers at
  knotless-server --data /tmp/kl --listen 127.0.0.1:0 &
  cat /tmp/kl/server.url`

func newCommand() *cobra.Command {
	o := &serverOptions{}
	cmd := &cobra.Command{
		Use:           "knotless-server [flags]",
		Short:         "Run the Knotless CI server",
		Long:          serverLong,
		Example:       serverExample,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q: knotless-server takes only flags", args[0])
			}
			return nil
		},
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := envflag.Apply(cmd.Flags()); err != nil {
				return &usageError{err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.complete(cmd.ErrOrStderr()); err != nil {
				return err
			}
			return run(cmd.Context(), o.cfg, o.retention, o.objects, o.database)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	cmd.AddCommand(newMigrateCommand(), newOIDCKeysCommand())
	o.bind(cmd)
	return cmd
}

// bind binds the server's flags (and their KNOTLESS_* variables) to o.
func (o *serverOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.cfg.DataDir, "data", server.DefaultDataDir,
		"data directory: database, logs, git repositories, keys and admin.token")
	f.StringVar(&o.database, "database", "",
		"PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DB) for several replicas sharing --data; default SQLite in DATA/knotless.db")
	f.StringVar(&o.cfg.Listen, "listen", server.DefaultListen, "address to listen on, host:port")
	f.StringVar(&o.cfg.URL, "url", "",
		"public base URL clients and runners reach the server at (default http://LISTEN)")
	f.DurationVar(&o.cfg.Lease, "lease", server.DefaultLease,
		"how long a claimed run lives without a runner heartbeat before it ends errored/runner-lost")
	f.DurationVar(&o.cfg.HandoverGrace, "handover-grace", server.DefaultHandoverGrace,
		"how long the runs of a stopping runner that handed them over wait for its next process before they end errored/runner-lost")
	f.IntVar(&o.cfg.Limits.MaxConns, "max-conns", server.DefaultMaxConns,
		"connections held at once; past it the one waiting longest for a request is closed (a keep-alive idle under 1 s is not), or new ones are refused (503, Retry-After: 5)")
	f.IntVar(&o.cfg.Limits.MaxConnsPerClient, "max-conns-per-client", server.DefaultMaxConnsPerClient,
		"connections of one client address (IPv6: /64) held at once; behind a reverse proxy raise it to --max-conns")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	o.cfg.MaxPushSize, o.cfg.MaxFetchRequest = server.DefaultMaxPushSize, server.DefaultMaxFetchRequest
	f.Var(envflag.Size{P: &o.cfg.MaxPushSize, AllowZero: true}, "max-push-size",
		"largest push (request body, uncompressed) the server takes; a larger one is refused before it is stored")
	f.Var(envflag.Size{P: &o.cfg.MaxFetchRequest, AllowZero: true}, "max-fetch-request",
		"largest fetch request (wants and haves, uncompressed); a larger one is cut there and refused")
	o.cfg.MaxOutputsSize = server.DefaultMaxOutputsSize
	f.Var(envflag.Size{P: &o.cfg.MaxOutputsSize, AllowZero: true}, "max-outputs-size",
		"largest outputs archive of one run; a larger one is refused before it is stored, and the run's setup log says so")
	f.Var(envflag.Size{P: &o.cfg.RepoQuota, AllowZero: true}, "repo-quota",
		"largest size of one repository on disk; a push that would take it past is refused (0: no quota)")
	f.StringVar(&o.cfg.ReleaseDir, "release-dir", "",
		"serve the release files in `DIR` (what make release wrote) to anyone at /-/download/FILE, for the runner pods' KNOTLESS_DOWNLOAD_URL=URL/-/download, and /-/download/install.sh, which installs knotless-run from them on a plain host")
	f.DurationVar(&o.cfg.Schedules.MinInterval, "schedule-min-interval", server.DefaultScheduleMinInterval,
		"shortest time between two runs of one schedule (a workflow's on.schedule); a schedule due more often never runs, and the push and knotless schedule list say so. 1m allows every minute")
	limits := clientLimitFlags(f, &o.cfg.ClientLimits)
	limits = append(limits, retentionFlags(f, &o.retention)...)
	limits = append(limits, objectStoreFlags(f, &o.objects)...)
	for _, name := range append([]string{"data", "database", "listen", "url", "lease", "handover-grace", "max-conns", "max-conns-per-client", "log-level",
		"max-push-size", "max-fetch-request", "max-outputs-size", "repo-quota", "release-dir", "schedule-min-interval"}, limits...) {
		envflag.Bind(f, name)
	}
}

// complete checks --log-level and --url (a usage error names the flag)
// and makes the logger, writing to stderr: the server's own, and slog's
// default for the libraries that log through it.
func (o *serverOptions) complete(stderr io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	if o.cfg.URL != "" {
		u, err := server.CheckURL(o.cfg.URL)
		if err != nil {
			return &usageError{err}
		}
		o.cfg.URL = u
	}
	if err := checkRetention(o.retention); err != nil {
		return err
	}
	if o.cfg.Schedules.MinInterval < time.Minute {
		return usagef("--schedule-min-interval %s: want a duration of at least 1m (cron's finest step), e.g. 5m", o.cfg.Schedules.MinInterval)
	}
	if err := o.objects.check(); err != nil {
		return err
	}
	o.cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// Libraries that log through slog's default logger (indigo does) go
	// to the same place, under --log-level, their informational lines at
	// debug: they are not events of this server an operator follows.
	slog.SetDefault(slog.New(demoted{o.cfg.Logger.Handler()}))
	return nil
}

// run opens the store database names (openStore) and hands it to the
// server, serves until ctx ends or SIGINT or SIGTERM, then closes the
// server and after it the store.
func run(ctx context.Context, cfg server.Config, retention server.Retention, objects objectStoreOptions, database string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// A second server on the same data directory most likely also has the
	// same --listen: name the directory rather than the busy port. New
	// takes the lock for real.
	if database == "" { // replicas on PostgreSQL share the directory
		if err := server.CheckDataDir(cfg.DataDir); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	if cfg.URL == "" {
		cfg.URL = "http://" + ln.Addr().String() // the real port when --listen ends in :0
		if ip := ln.Addr().(*net.TCPAddr).IP; ip.IsUnspecified() {
			cfg.Logger.Warn("clone URLs will name "+cfg.URL+", which other machines cannot reach; set --url to the address clients use",
				"listen", cfg.Listen)
		}
	}
	st, name, err := openStore(ctx, cfg.DataDir, database)
	if err != nil {
		ln.Close()
		return err
	}
	cfg.Store, cfg.StoreName = st, name
	srv, err := server.New(ctx, cfg)
	if err != nil {
		st.Close()
		ln.Close()
		return err
	}
	stopObjects, err := startObjects(ctx, srv, objects, cfg.Logger)
	if err != nil {
		srv.Close()
		st.Close()
		ln.Close()
		return err
	}
	stopRetention := srv.StartRetention(retention)
	// Scripts and tests that start the server with --listen HOST:0 read the
	// real address from here; it is removed on a clean stop. Only the
	// process holding the data directory's lock (New took it) gets here,
	// so a refused second start never touches the first one's file.
	// Replicas sharing the directory would overwrite each other's: they
	// write none.
	if database == "" {
		urlFile := filepath.Join(cfg.DataDir, URLFile)
		if err := writeFileAtomic(urlFile, []byte(cfg.URL+"\n")); err != nil {
			stopRetention()
			stopObjects()
			srv.Close()
			st.Close()
			ln.Close()
			return fmt.Errorf("write %s: %w", urlFile, err)
		}
		defer os.Remove(urlFile)
	}
	serveErr := srv.Serve(ctx, ln)
	stopRetention()
	stopObjects()
	srv.Close()
	if err := st.Close(); err != nil && serveErr == nil {
		serveErr = fmt.Errorf("close: %w", err)
	}
	if serveErr == nil {
		cfg.Logger.Info("server stopped")
	}
	return serveErr
}

// demoted is a slog handler that passes records below warn on at debug.
type demoted struct{ slog.Handler }

func (d demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return d.Handler.Enabled(ctx, demote(l))
}

func (d demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return d.Handler.Handle(ctx, r)
}

func (d demoted) WithAttrs(as []slog.Attr) slog.Handler { return demoted{d.Handler.WithAttrs(as)} }
func (d demoted) WithGroup(name string) slog.Handler    { return demoted{d.Handler.WithGroup(name)} }

func demote(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

// URLFile is the file in the data directory holding the URL the running
// server answers at, e.g. "http://127.0.0.1:41234\n".
const URLFile = "server.url"

// writeFileAtomic writes data to name through a temporary file and a rename,
// so a reader never sees a partial file.
func writeFileAtomic(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
