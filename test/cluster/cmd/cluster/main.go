// Command knotless-test-cluster builds, starts and stops the local
// single-node Kubernetes cluster Knotless's tests run against. See
// `knotless-test-cluster --help` and docs/development.md "Try it on a local cluster".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"knotless.dev/knotless/test/cluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		var st statusError
		if errors.As(err, &st) {
			fmt.Fprintln(os.Stderr, st.Error())
		} else {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(1)
	}
}

// statusError is `status`'s answer "not up": printed as is, exit 1.
type statusError struct{ error }

func newRoot() *cobra.Command {
	var cfg cluster.Config
	root := &cobra.Command{
		Use:   "knotless-test-cluster",
		Short: "A real single-node Kubernetes cluster for Knotless's tests",
		Long: `knotless-test-cluster runs a real single-node Kubernetes ` + cluster.KubernetesVersion + ` cluster on this
machine: kube-apiserver with an audit log, etcd, kube-controller-manager,
kube-scheduler, kubelet with containerd ` + cluster.ContainerdVersion + ` and runc ` + cluster.RuncVersion + ` (and gVisor's runsc for pods
of RuntimeClass ` + cluster.RuntimeClassGVisor + `), kube-proxy, NetworkPolicies enforced by
kube-network-policies, and CoreDNS. Binaries are built from source once (about
14–30 minutes on 2 cores) and cached; images are built locally and
imported, nothing is pulled. It needs root and installs the Debian packages it
uses (` + strings.Join(cluster.Packages, ", ") + `).

State (PKI, configs, pids, logs, etcd, the admin kubeconfig) lives in --state
(env ` + cluster.StateDirEnv + `); binaries in --cache (env ` + cluster.CacheDirEnv + `).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			var err error
			cfg, err = cfg.Defaults()
			return err
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&cfg.StateDir, "state", "", "state directory (default $"+cluster.StateDirEnv+" or "+cluster.DefaultStateDir+")")
	f.StringVar(&cfg.CacheDir, "cache", "", "binary cache directory, keyed by component and version (default $"+cluster.CacheDirEnv+" or "+cluster.DefaultCacheDir+")")
	f.StringVar(&cfg.SourceDir, "source", "", "the harness source directory test/cluster (default: found from the working directory)")
	f.StringVar(&cfg.NodeIP, "node-ip", "", "IPv4 address the node advertises (default: the default route interface's)")
	f.StringVar(&cfg.Interface, "interface", "", "uplink interface pod traffic must never leave by (default: the default route's)")

	root.AddCommand(
		buildCmd(&cfg),
		upCmd(&cfg),
		downCmd(&cfg),
		packagesCmd(),
		statusCmd(&cfg),
		kubectlCmd(&cfg),
	)
	return root
}

// upCmd is `up`: start the cluster (returns at once if it is already up).
func upCmd(cfg *cluster.Config) *cobra.Command {
	return &cobra.Command{
		Use:   "up",
		Short: "Start the cluster (returns at once if it is already up)",
		Long: `up installs missing Debian packages, builds missing binaries, removes what an
earlier cluster left behind, writes PKI and configs, starts every process, imports
the images, deploys CoreDNS and waits until the node is Ready. Run it again at any
time: on a healthy cluster it only imports job images it does not hold yet.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t0 := time.Now()
			if err := cfg.Up(cmd.Context()); err != nil {
				if errors.Is(err, cluster.ErrNotRoot) || errors.Is(err, cluster.ErrOtherCluster) {
					return err
				}
				return fmt.Errorf("%w\n(process logs: %s/logs; stop what this up started with: knotless-test-cluster down)", err, cfg.StateDir)
			}
			fmt.Printf("cluster up in %s\nexport KUBECONFIG=%s\naudit log: %s\n", time.Since(t0).Round(100*time.Millisecond), cfg.AdminKubeconfig(), cfg.AuditLog())
			return nil
		},
	}
}

// packagesCmd is `packages`: print the Debian packages the cluster runs on, one a line.
func packagesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "packages",
		Short: "Print the Debian packages the cluster runs on, one a line",
		Long: `packages prints the Debian packages that up installs when they are missing,
one a line, so that a script can install them together with its own in one
apt-get run (.ci/run does). It needs neither root nor a cluster.`,
		Args: cobra.NoArgs,
		// No defaults to find: this works on any machine.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		Run: func(*cobra.Command, []string) {
			fmt.Println(strings.Join(cluster.Packages, "\n"))
		},
	}
}

// statusCmd is `status`: say whether the cluster is up (exit 0, with each process's memory) or not (exit 1).
func statusCmd(cfg *cluster.Config) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Say whether the cluster is up (exit 0, with each process's memory) or not (exit 1)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("cannot tell: reading the cluster's pid files and client certificate needs root")
			}
			if err := cfg.Healthy(cmd.Context()); err != nil {
				return statusError{fmt.Errorf("cluster not up: %w", err)}
			}
			fmt.Printf("cluster up\nexport KUBECONFIG=%s\naudit log: %s\n\n", cfg.AdminKubeconfig(), cfg.AuditLog())
			cfg.WriteStatus(os.Stdout)
			return nil
		},
	}
}

// kubectlCmd is `kubectl`: run the cluster's kubectl with the admin kubeconfig.
func kubectlCmd(cfg *cluster.Config) *cobra.Command {
	return &cobra.Command{
		Use:   "kubectl [ARGS...]",
		Short: "Run the cluster's kubectl with the admin kubeconfig",
		Long: `kubectl runs the cluster's own kubectl (v1.37.2) with the admin kubeconfig;
every argument goes to kubectl. Give harness flags before "kubectl", e.g.
knotless-test-cluster --state DIR kubectl get pods -A.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Flag parsing is off so kubectl gets its own flags: take
			// the harness's flags given before the subcommand here.
			args, err := takeFlags(cmd.Root().PersistentFlags(), args)
			if err != nil {
				return err
			}
			if *cfg, err = cfg.Defaults(); err != nil {
				return err
			}
			if _, err := os.Stat(cfg.StateDir + "/bin/kubectl"); err != nil {
				return fmt.Errorf("no cluster in %s yet: run knotless-test-cluster up first", cfg.StateDir)
			}
			c := exec.CommandContext(cmd.Context(), cfg.StateDir+"/bin/kubectl", append([]string{"--kubeconfig", cfg.AdminKubeconfig()}, args...)...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			err = c.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			return err
		},
	}
}

// takeFlags sets the leading arguments that are flags of fs ("--name value"
// or "--name=value") and returns the rest.
func takeFlags(fs *pflag.FlagSet, args []string) ([]string, error) {
	for len(args) > 0 && strings.HasPrefix(args[0], "--") {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(args[0], "--"), "=")
		if fs.Lookup(name) == nil {
			break
		}
		args = args[1:]
		if !hasValue {
			if len(args) == 0 {
				return nil, fmt.Errorf("flag --%s needs a value", name)
			}
			value, args = args[0], args[1:]
		}
		if err := fs.Set(name, value); err != nil {
			return nil, err
		}
	}
	return args, nil
}

func downCmd(cfg *cluster.Config) *cobra.Command {
	var wipe bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop what up started and remove pods' containers, mounts, CNI and netfilter leftovers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Finish stopping even if interrupted: a half-stopped cluster is
			// worse than a slow stop.
			return cfg.Down(context.WithoutCancel(cmd.Context()), wipe)
		},
	}
	cmd.Flags().BoolVar(&wipe, "wipe", false, "also remove the state directory (PKI, etcd, logs, kubeconfigs)")
	return cmd
}

// buildCmd is `build [--only NAME,...] [--copy-to DIR]`: the cluster's
// binaries that are missing from the cache, or only those named, and
// copies of those in DIR (what `make builder-image` takes BuildKit and
// runc from).
func buildCmd(cfg *cluster.Config) *cobra.Command {
	var only []string
	var copyTo string
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the cluster's binaries that are missing from the cache",
		Long: `Build the cluster's binaries that are missing from the cache (about 14-30 minutes
on 2 cores the first time), or with --only just those named: buildkitd, buildctl
and runc make the container builds' builder image (make builder-image, which
copies them with --copy-to DIR).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := cluster.Build(cmd.Context(), cluster.BuildOptions{CacheDir: cfg.CacheDir, SourceDir: cfg.SourceDir, Log: cfg.Log, Only: only})
			if err != nil {
				return err
			}
			all := []struct{ name, path string }{
				{"kube", b.Kube}, {"kube-network-policies", b.NetworkPolicies}, {"coredns", b.CoreDNS}, {"runsc", b.Runsc},
				{"containerd-shim-runsc-v1", b.RunscShim}, {"containerd", b.Containerd}, {"ctr", b.Ctr}, {"containerd-shim-runc-v2", b.RuncShim},
				{"runc", b.Runc}, {"registry", b.Registry}, {"buildkitd", b.Buildkitd}, {"buildctl", b.Buildctl},
			}
			if copyTo != "" {
				if err := os.MkdirAll(copyTo, 0o755); err != nil {
					return err
				}
			}
			for _, x := range all {
				if len(only) > 0 && !slices.Contains(only, x.name) {
					continue
				}
				fmt.Printf("%-25s %s\n", x.name, x.path)
				if copyTo != "" {
					if err := copyExecutable(x.path, filepath.Join(copyTo, x.name)); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&only, "only", nil, "build only these binaries (e.g. buildkitd,buildctl,runc)")
	cmd.Flags().StringVar(&copyTo, "copy-to", "", "also copy the binaries built (or --only those) into this directory")
	return cmd
}

// copyExecutable copies src to dst (mode 0755), replacing it whole.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".new"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
