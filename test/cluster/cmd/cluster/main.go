// Command knotless-test-cluster builds, starts and stops the local
// single-node Kubernetes cluster Knotless's tests run against. See
// `knotless-test-cluster --help` and README.md "Try it on a local cluster".
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/test/cluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var cfg cluster.Config
	root := &cobra.Command{
		Use:   "knotless-test-cluster",
		Short: "A real single-node Kubernetes cluster for Knotless's tests",
		Long: `knotless-test-cluster runs a real single-node Kubernetes ` + cluster.KubernetesVersion + ` cluster on this
machine: kube-apiserver with an audit log, etcd, kube-controller-manager,
kube-scheduler, kubelet with containerd and runc, kube-proxy, NetworkPolicies
enforced by kube-network-policies, and CoreDNS. Binaries are built from source
once (about 20 minutes on 2 cores) and cached; images are built locally and
imported, nothing is pulled. It needs root and installs the Debian packages it
uses (` + fmt.Sprint(cluster.Packages) + `).

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
		&cobra.Command{
			Use:   "build",
			Short: "Build the cluster's binaries that are missing from the cache",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				b, err := cluster.Build(cmd.Context(), cluster.BuildOptions{CacheDir: cfg.CacheDir, SourceDir: cfg.SourceDir, Log: cfg.Log})
				if err != nil {
					return err
				}
				fmt.Printf("kube                   %s\nkube-network-policies  %s\ncoredns                %s\n", b.Kube, b.NetworkPolicies, b.CoreDNS)
				return nil
			},
		},
		&cobra.Command{
			Use:   "up",
			Short: "Start the cluster (returns at once if it is already up)",
			Long: `up installs missing Debian packages, builds missing binaries, removes what an
earlier cluster left behind, writes PKI and configs, starts every process, imports
the images, deploys CoreDNS and waits until the node is Ready. Run it again at any
time: on a healthy cluster it returns at once.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				t0 := time.Now()
				if err := cfg.Up(cmd.Context()); err != nil {
					return fmt.Errorf("%w\n(process logs: %s/logs; stop what started with: knotless-test-cluster down)", err, cfg.StateDir)
				}
				fmt.Printf("cluster up in %s\nexport KUBECONFIG=%s\naudit log: %s\n", time.Since(t0).Round(100*time.Millisecond), cfg.AdminKubeconfig(), cfg.AuditLog())
				return nil
			},
		},
		downCmd(&cfg),
		&cobra.Command{
			Use:   "status",
			Short: "Say whether the cluster is up (exit 0, with each process's memory) or not (exit 1)",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if err := cfg.Healthy(cmd.Context()); err != nil {
					return fmt.Errorf("cluster not up: %w", err)
				}
				fmt.Printf("cluster up\nexport KUBECONFIG=%s\naudit log: %s\n\n", cfg.AdminKubeconfig(), cfg.AuditLog())
				cfg.WriteStatus(os.Stdout)
				return nil
			},
		},
		&cobra.Command{
			Use:                "kubectl [ARGS...]",
			Short:              "Run the cluster's kubectl with the admin kubeconfig",
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				c := exec.CommandContext(cmd.Context(), cfg.StateDir+"/bin/kubectl", append([]string{"--kubeconfig", cfg.AdminKubeconfig()}, args...)...)
				c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
				err := c.Run()
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					os.Exit(ee.ExitCode())
				}
				return err
			},
		},
	)
	return root
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
