package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Fixed addresses of the cluster. Pod and Service ranges follow the kubeadm
// defaults; DNSIP is the kube-dns Service's ClusterIP.
const (
	KubernetesVersion = "v1.37.2"
	PodCIDR           = "10.244.0.0/16" // --cluster-cidr; the node gets 10.244.0.0/24
	NodePodCIDR       = "10.244.0.0/24" // the bridge CNI plugin's host-local range
	ServiceCIDR       = "10.96.0.0/16"  // --service-cluster-ip-range
	APIServiceIP      = "10.96.0.1"     // the `kubernetes` Service
	DNSIP             = "10.96.0.10"    // the `kube-dns` Service
	ClusterDomain     = "cluster.local"
	APIPort           = 6443
	BridgeName        = "cni0"

	// DefaultStateDir holds PKI, configs, pids, logs and runtime state.
	DefaultStateDir = "/var/lib/knotless-test-cluster"
	// DefaultCacheDir holds built binaries keyed by component and version.
	DefaultCacheDir = "/var/cache/knotless-test-cluster"
	// StateDirEnv, when set, overrides DefaultStateDir (also read by the
	// tests' helper, knotless.dev/knotless/test/kubetest).
	StateDirEnv = "KNOTLESS_TEST_CLUSTER"
	// CacheDirEnv, when set, overrides DefaultCacheDir.
	CacheDirEnv = "KNOTLESS_TEST_CLUSTER_CACHE"
)

// Config says where the cluster lives and how this machine is reached. Zero
// fields are filled by Defaults.
type Config struct {
	StateDir  string // absolute; created by Up
	CacheDir  string // absolute; binaries built by Build
	SourceDir string // the test/cluster directory of the work tree (holds kube/ and pause/)
	NodeName  string // lowercased hostname by default
	NodeIP    string // IPv4 of Interface by default
	Interface string // the interface with the default route (eth0 here)
	Log       *slog.Logger
}

// Defaults returns c with every empty field filled from the environment and
// this machine. It fails when no interface with an IPv4 default route exists
// (the kubelet and API server must advertise a routable address).
func (c Config) Defaults() (Config, error) {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.StateDir == "" {
		c.StateDir = os.Getenv(StateDirEnv)
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.CacheDir == "" {
		c.CacheDir = os.Getenv(CacheDirEnv)
	}
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir
	}
	var err error
	for _, p := range []*string{&c.StateDir, &c.CacheDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return c, err
		}
	}
	if c.SourceDir == "" {
		// Only building (Build, Up) needs the source; other commands work
		// from anywhere.
		c.SourceDir, _ = findSourceDir()
	}
	if c.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("node name: %w", err)
		}
		c.NodeName = nodeName(h)
	}
	if c.Interface == "" {
		c.Interface, err = defaultRouteInterface()
		if err != nil {
			return c, err
		}
	}
	if c.NodeIP == "" {
		c.NodeIP, err = interfaceIPv4(c.Interface)
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// nodeName turns a hostname into a valid node name (an RFC 1123 subdomain:
// lowercase letters, digits, '-' and '.', alphanumeric at both ends).
func nodeName(host string) string {
	b := []byte(strings.ToLower(host))
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '.') {
			b[i] = '-'
		}
	}
	n := strings.Trim(string(b), "-.")
	if n == "" {
		n = "node"
	}
	return n
}

// findSourceDir looks for the harness's own source (a directory holding
// kube/go.mod) from the working directory upwards, also trying test/cluster
// below each level, so both `go run ./cmd/cluster` in test/cluster and
// `make cluster-up` at the repository root work.
func findSourceDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		for _, cand := range []string{dir, filepath.Join(dir, "test", "cluster")} {
			if _, err := os.Stat(filepath.Join(cand, "kube", "go.mod")); err == nil {
				return cand, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errNoSource
		}
		dir = parent
	}
}

// defaultRouteInterface reads /proc/net/route for the IPv4 default route.
func defaultRouteInterface() (string, error) {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", fmt.Errorf("find the default route: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == "00000000" {
			return f[0], nil
		}
	}
	return "", errors.New("no IPv4 default route: the node needs an address to advertise (pass --node-ip and --interface)")
}

func interfaceIPv4(name string) (string, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("interface %s: %w", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String(), nil
		}
	}
	return "", fmt.Errorf("interface %s has no IPv4 address", name)
}

// path joins elements under the state directory.
func (c Config) path(elem ...string) string {
	return filepath.Join(append([]string{c.StateDir}, elem...)...)
}

// AdminKubeconfig is the path of the cluster-admin kubeconfig Up writes.
func (c Config) AdminKubeconfig() string { return c.path("admin.kubeconfig") }

// AuditLog is the path of the API server's audit log (JSON lines,
// audit.k8s.io/v1 Event).
func (c Config) AuditLog() string { return c.path("logs", "audit.log") }

// AuthenticationConfig is the path of the API server's structured
// authentication configuration (apiserver.config.k8s.io/v1
// AuthenticationConfiguration, --authentication-config). Up writes it with
// no JWT issuer; the API server reloads it when it changes, so tests add
// the issuers they trust (knotless.dev/knotless/test/kubetest).
func (c Config) AuthenticationConfig() string { return c.path(AuthenticationConfigFile) }

// AuthenticationConfigFile is AuthenticationConfig relative to the state
// directory.
const AuthenticationConfigFile = "authn/authentication-config.yaml"

// emptyAuthenticationConfig trusts no JWT issuer: only the client
// certificates and service-account tokens the API server knows anyway.
const emptyAuthenticationConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt: []
`

// containerdSocket is containerd's gRPC socket (kept short: unix socket
// paths are limited to 107 bytes).
func (c Config) containerdSocket() string { return c.path("run", "containerd.sock") }
