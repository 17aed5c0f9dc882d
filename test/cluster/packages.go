package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Packages are the Debian packages the cluster runs on and builds with:
// the CNI plugins, netfilter tools for kube-proxy and the harness,
// busybox-static for the job base image, iproute2 for the bridge, and
// BuildPackages. containerd and runc are not Debian's: Build builds them.
var Packages = append([]string{"containernetworking-plugins", "iptables", "nftables", "conntrack", "busybox-static", "iproute2", "kmod"}, BuildPackages...)

// BuildPackages are what runc's build needs beside Go: a C compiler and
// libc headers (its nsenter is C), and libseccomp's static library with
// pkg-config, through which libseccomp-golang finds it (runc applies
// seccomp profiles only when built with it).
var BuildPackages = []string{"gcc", "libc6-dev", "libseccomp-dev", "pkg-config"}

// ensurePackages installs the Packages that dpkg does not list as installed
// (apt-get, non-interactive). It needs root.
func ensurePackages(ctx context.Context, log *slog.Logger) error {
	return ensureThesePackages(ctx, log, Packages)
}

// ensureThesePackages installs those of pkgs that dpkg does not list as
// installed. While another apt or dpkg holds a lock (CI installs packages
// in the background while the binaries build), each apt-get is tried again
// every 5 s for up to 15 minutes. It needs root when something is missing.
func ensureThesePackages(ctx context.Context, log *slog.Logger, pkgs []string) error {
	var missing []string
	for _, p := range pkgs {
		out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("missing Debian packages %s, and installing them needs root", strings.Join(missing, " "))
	}
	log.Info("installing Debian packages", "packages", missing)
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)} {
		if err := aptGet(ctx, log, env, args); err != nil {
			return err
		}
	}
	return nil
}

// aptGet runs apt-get with args, again every 5 s for up to 15 minutes while
// it fails on another process's lock (apt-get update does not wait for the
// lists lock, whatever DPkg::Lock::Timeout says).
func aptGet(ctx context.Context, log *slog.Logger, env, args []string) error {
	deadline := time.Now().Add(15 * time.Minute)
	for {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		locked := strings.Contains(string(out), "Could not get lock") || strings.Contains(string(out), "Unable to lock")
		if !locked || time.Now().After(deadline) {
			return fmt.Errorf("apt-get %s: %w: %s", args[0], err, lastLines(string(out), 10))
		}
		log.Info("apt-get waits for another package manager's lock", "command", args[0])
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}
