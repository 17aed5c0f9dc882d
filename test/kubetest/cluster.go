package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// EnvStateDir overrides DefaultStateDir (the same variable test/cluster reads).
	EnvStateDir = "KNOTLESS_TEST_CLUSTER"
	// EnvRequired, when "1", turns "cluster not running" from a skip into a
	// failure (make test and make test-e2e set it).
	EnvRequired = "KNOTLESS_TEST_CLUSTER_REQUIRED"
	// DefaultStateDir is where test/cluster keeps the cluster's state.
	DefaultStateDir = "/var/lib/knotless-test-cluster"

	// readyTimeout bounds the /readyz probe: a running cluster answers in
	// milliseconds, and a test run without a cluster must not hang.
	readyTimeout = 5 * time.Second
)

// Cluster is the running local cluster, seen with cluster-admin rights.
// Use Config and Client for setup (namespaces, NetworkPolicies) and for
// checking results, never as the identity a runner under test works with.
type Cluster struct {
	// Config is the admin REST config, from StateDir/admin.kubeconfig.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// StateDir is the cluster's state directory.
	StateDir string
	// AuditLogPath is the API server's audit log: JSON lines of
	// audit.k8s.io/v1 Event (see AuditEvent), rotated by the API server
	// into audit-<time>.log beside it.
	AuditLogPath string
	// NodeName is the name of the cluster's only node.
	NodeName string
}

// Connect returns the local cluster, or skips the test with "cluster not
// running: make cluster-up" when its admin kubeconfig is missing or its API
// server does not answer /readyz within a few seconds. With
// KNOTLESS_TEST_CLUSTER_REQUIRED=1 it fails the test instead of skipping.
// The state directory is $KNOTLESS_TEST_CLUSTER, or DefaultStateDir.
//
// `go test` caches a passing result keyed by the environment the test read,
// not by whether the cluster was up: run cluster tests with -count=1 (the
// Makefile does) so a result always reflects the cluster of that moment.
func Connect(t testing.TB) *Cluster {
	t.Helper()
	// Read before connecting so the variable is part of the test cache key
	// whether or not the cluster answers.
	required := os.Getenv(EnvRequired) == "1"
	c, err := Load(context.Background())
	if err != nil {
		msg := fmt.Sprintf("cluster not running: make cluster-up (%v)", err)
		if required {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return c
}

// Load is Connect without a testing.TB: it loads the admin kubeconfig
// from the state directory and checks that the API server answers /readyz
// within a few seconds. The error says which of the two failed.
func Load(ctx context.Context) (*Cluster, error) {
	dir := os.Getenv(EnvStateDir)
	if dir == "" {
		dir = DefaultStateDir
	}
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, fmt.Errorf("read admin kubeconfig: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load admin kubeconfig %s: %w", kubeconfig, err)
	}
	tuneConfig(cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("make admin client: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
	if err != nil {
		if b := strings.TrimSpace(string(body)); b != "" {
			err = fmt.Errorf("%w: %s", err, b)
		}
		return nil, fmt.Errorf("GET %s/readyz: %w", cfg.Host, err)
	}
	node, err := nodeName(rctx, client)
	if err != nil {
		return nil, err
	}
	return &Cluster{
		Config:       cfg,
		Client:       client,
		StateDir:     dir,
		AuditLogPath: filepath.Join(dir, "logs", "audit.log"),
		NodeName:     node,
	}, nil
}

// tuneConfig raises client-go's default rate limit (5 QPS, burst 10), which
// parallel tests that poll would otherwise queue behind.
func tuneConfig(cfg *rest.Config) {
	cfg.QPS = 100
	cfg.Burst = 200
}

// nodeName returns the single node's name; the harness names it after the
// lowercased hostname, which is the fallback while the node registers.
func nodeName(ctx context.Context, client kubernetes.Interface) (string, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list nodes: %w", err)
	}
	if len(nodes.Items) == 1 {
		return nodes.Items[0].Name, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("%d nodes and no hostname: %w", len(nodes.Items), err)
	}
	if len(nodes.Items) > 1 {
		return "", errors.New("more than one node: the local cluster has exactly one")
	}
	return strings.ToLower(host), nil
}

// stepContext returns a context for one bounded step of a test: cancelled
// after d or when the test ends, whichever comes first.
func stepContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
