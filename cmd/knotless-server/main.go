// Command knotless-server is the Knotless control plane: accounts,
// repositories over git smart HTTP, pipelines and runs, runners, secrets,
// logs and the XRPC API. Flags map onto server.Config; everything else is in
// internal/server.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/version"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "knotless-server:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var cfg server.Config
	var logLevel string
	cmd := &cobra.Command{
		Use:   "knotless-server",
		Short: "Run the Knotless CI server",
		Long: `knotless-server runs the Knotless control plane: the XRPC API under /xrpc/,
git repositories at /OWNER/NAME.git, pipelines, runs, runners, secrets and logs.

On first start it creates the data directory, an "admin" account, and writes
the admin's API token to DATA/admin.token (mode 0600). While it runs,
DATA/server.url holds the URL it answers at (handy with --listen 127.0.0.1:0).

Every flag can also be set with the environment variable named after it,
e.g. KNOTLESS_DATA for --data; a flag on the command line wins.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return envFallbacks(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			return run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data", server.DefaultDataDir,
		"data directory: database, logs, git repositories, keys and admin.token")
	f.StringVar(&cfg.Listen, "listen", server.DefaultListen, "address to listen on, host:port")
	f.StringVar(&cfg.URL, "url", "",
		"public base URL clients and runners reach the server at (default http://LISTEN)")
	f.DurationVar(&cfg.Lease, "lease", server.DefaultLease,
		"how long a claimed run lives without a runner heartbeat before it ends errored/runner-lost")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	for _, name := range []string{"data", "listen", "url", "lease", "log-level"} {
		fl := f.Lookup(name)
		fl.Usage += " [env " + envName(name) + "]"
	}
	return cmd
}

// envName is the environment variable of a flag: KNOTLESS_ + NAME.
func envName(flag string) string {
	return "KNOTLESS_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// envFallbacks sets every flag not given on the command line from its
// environment variable, when set.
func envFallbacks(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed || err != nil {
			return
		}
		if v, ok := os.LookupEnv(envName(fl.Name)); ok && v != "" {
			if e := fl.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(fl.Name), v, e)
			}
		}
	})
	return err
}

func run(ctx context.Context, cfg server.Config) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	if cfg.URL == "" {
		cfg.URL = "http://" + ln.Addr().String() // the real port when --listen ends in :0
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	// Scripts and tests that start the server with --listen HOST:0 read the
	// real address from here; it is removed on a clean stop.
	urlFile := filepath.Join(cfg.DataDir, URLFile)
	if err := writeFileAtomic(urlFile, []byte(cfg.URL+"\n")); err != nil {
		srv.Close()
		ln.Close()
		return fmt.Errorf("write %s: %w", urlFile, err)
	}
	defer os.Remove(urlFile)
	serveErr := srv.Serve(ctx, ln)
	if err := srv.Close(); err != nil && serveErr == nil {
		serveErr = fmt.Errorf("close: %w", err)
	}
	if serveErr == nil {
		cfg.Logger.Info("server stopped")
	}
	return serveErr
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
