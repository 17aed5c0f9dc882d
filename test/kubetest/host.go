package kubetest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BridgeInterface is the CNI bridge of the local cluster: its address is
// the pods' gateway, the address at which pods reach this host.
const BridgeInterface = "cni0"

// HostIP returns the IPv4 address of BridgeInterface on this host: bind a
// server there (port 0) for pods to reach it. Fails the test when the
// bridge has no IPv4 address.
func (c *Cluster) HostIP(t testing.TB) string {
	t.Helper()
	ifc, err := net.InterfaceByName(BridgeInterface)
	if err != nil {
		t.Fatalf("the address pods reach the host at: %v", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatalf("addresses of %s: %v", BridgeInterface, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Fatalf("%s has no IPv4 address", BridgeInterface)
	return ""
}

// CtrPath is the cluster's own ctr (containerd's client, the version of its
// containerd), linked in its state directory.
func (c *Cluster) CtrPath() string { return filepath.Join(c.StateDir, "bin", "ctr") }

// ContainerdSocket is the cluster's containerd socket.
func (c *Cluster) ContainerdSocket() string {
	return filepath.Join(c.StateDir, "run", "containerd.sock")
}

// HasImage tells whether the cluster's containerd (namespace k8s.io)
// holds ref.
func (c *Cluster) HasImage(t testing.TB, ref string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.CtrPath(), "--address", c.ContainerdSocket(), "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	for _, r := range strings.Fields(string(out)) {
		if r == ref {
			return true
		}
	}
	return false
}

// ImportImage imports a docker image archive into the cluster's
// containerd (`ctr -n k8s.io images import`), so pods can use it with
// pull policy Never or IfNotPresent. Importing a ref again replaces it.
func (c *Cluster) ImportImage(t testing.TB, archive string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.CtrPath(), "--address", c.ContainerdSocket(), "-n", "k8s.io", "images", "import", "--snapshotter", "overlayfs", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("import image %s: %v\n%s", archive, err, out)
	}
}

// Kubectl runs the cluster's own kubectl (StateDir/bin/kubectl, the
// server's version) with the admin kubeconfig, in dir, and returns its
// combined output.
func (c *Cluster) Kubectl(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.KubectlPath(), append([]string{"--kubeconfig", filepath.Join(c.StateDir, "admin.kubeconfig")}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// KubectlPath is the cluster's own kubectl.
func (c *Cluster) KubectlPath() string { return filepath.Join(c.StateDir, "bin", "kubectl") }

// RemoveImage removes ref from the cluster's containerd (when no pod uses
// it any more, its layers are collected); errors are logged, not fatal.
func (c *Cluster) RemoveImage(t testing.TB, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, c.CtrPath(), "--address", c.ContainerdSocket(), "-n", "k8s.io", "images", "rm", ref).CombinedOutput(); err != nil {
		t.Logf("remove image %s: %v\n%s", ref, err, out)
	}
}
