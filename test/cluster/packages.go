package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
)

// Packages are the Debian packages the cluster runs on: the container
// runtime (containerd 1.6, runc), the CNI plugins, netfilter tools for
// kube-proxy and the harness, busybox-static for the job base image and
// iproute2 for the bridge.
var Packages = []string{"containerd", "runc", "containernetworking-plugins", "iptables", "nftables", "conntrack", "busybox-static", "iproute2", "kmod"}

// ensurePackages installs the Packages that dpkg does not list as installed
// (apt-get, non-interactive). It needs root.
func ensurePackages(ctx context.Context, log *slog.Logger) error {
	var missing []string
	for _, p := range Packages {
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
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w: %s", args[0], err, lastLines(string(out), 10))
		}
	}
	return nil
}
