package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// Up brings the cluster up and returns when the node is Ready, CoreDNS is
// available and the default namespace's ServiceAccount exists. It installs
// missing Debian packages, builds missing binaries (Build), and writes PKI
// and configs into the state directory.
//
// It is idempotent: on a healthy cluster it only imports the job images
// (jobImages) that containerd does not hold yet, and returns. Otherwise it
// first removes whatever an earlier cluster left (processes from stale pid
// files, pods' processes and shims, mounts, network namespaces, the bridge,
// netfilter rules) and starts from a fresh etcd and fresh runtime state,
// keeping PKI so existing kubeconfigs stay valid. Long because it is the
// cluster's start read in order, one printed phase after another (each
// phase's work is a function of its own), so that a failed start is
// found by its phase.
func (c Config) Up(ctx context.Context) error {
	t0 := time.Now()
	if c.Healthy(ctx) == nil {
		// Job images added since the cluster started: import them without
		// a restart.
		if err := c.ensureJobImages(ctx); err != nil {
			return err
		}
		c.Log.Info("cluster already up", "kubeconfig", c.AdminKubeconfig())
		return nil
	}
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if foreign := c.foreignListener(ctx); foreign != "" {
		return fmt.Errorf("%w: %s", ErrOtherCluster, foreign)
	}
	if c.SourceDir == "" {
		return errNoSource
	}
	phase := newPhases(c)
	phase("packages")
	if err := ensurePackages(ctx, c.Log); err != nil {
		return err
	}
	phase("binaries")
	bins, err := Build(ctx, BuildOptions{CacheDir: c.CacheDir, SourceDir: c.SourceDir, Log: c.Log})
	if err != nil {
		return err
	}
	phase("clean leftovers")
	c.stopAll(ctx)
	if err := c.resetRuntimeState(); err != nil {
		return err
	}
	phase("pki and configs")
	if err := os.MkdirAll(c.StateDir, 0o755); err != nil {
		return err
	}
	if err := c.ensurePKI(); err != nil {
		return err
	}
	if err := c.writeConfigs(); err != nil {
		return err
	}
	if err := c.writeLinks(bins); err != nil {
		return err
	}
	c.checkRunsc(ctx)
	if err := c.hostNetwork(ctx); err != nil {
		return err
	}
	procs := map[string]process{}
	for _, p := range c.processes() {
		procs[p.name] = p
	}
	phase("containerd and images")
	if err := shareNetnsDir(); err != nil {
		return fmt.Errorf("make %s a shared mount point: %w", netnsDir, err)
	}
	if err := c.start(procs["containerd"]); err != nil {
		return err
	}
	if err := poll(ctx, "containerd", 30*time.Second, 100*time.Millisecond, func() (bool, string, error) {
		_, err := run(ctx, c.bin("ctr"), "--address", c.containerdSocket(), "version")
		return err == nil, fmt.Sprint(err), c.exited(procs["containerd"])
	}); err != nil {
		return err
	}
	imgs, err := c.images(ctx, bins)
	if err != nil {
		return err
	}
	for _, img := range imgs {
		if err := c.ImportImage(ctx, img); err != nil {
			return err
		}
	}
	phase("etcd and kube-apiserver")
	for _, n := range []string{"etcd", "kube-apiserver"} {
		if err := c.start(procs[n]); err != nil {
			return err
		}
	}
	if err := poll(ctx, "kube-apiserver /readyz", 90*time.Second, 200*time.Millisecond, func() (bool, string, error) {
		err := c.readyz(ctx)
		if e := c.exited(procs["etcd"]); e != nil {
			return false, "", e
		}
		return err == nil, fmt.Sprint(err), c.exited(procs["kube-apiserver"])
	}); err != nil {
		return err
	}
	if err := c.kubectlApply(ctx, c.addons()); err != nil {
		return err
	}
	phase("node components")
	for _, n := range []string{"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kube-network-policies"} {
		if err := c.start(procs[n]); err != nil {
			return err
		}
	}
	if err := poll(ctx, "node "+c.NodeName+" Ready", 120*time.Second, 250*time.Millisecond, func() (bool, string, error) {
		out, err := c.kubectl(ctx, "get", "node", c.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && strings.TrimSpace(out) == "True", strings.TrimSpace(out) + fmt.Sprint(err), c.anyExited(procs)
	}); err != nil {
		return err
	}
	phase("default ServiceAccount and CoreDNS")
	if err := poll(ctx, "ServiceAccount default/default", 60*time.Second, 250*time.Millisecond, func() (bool, string, error) {
		_, err := c.kubectl(ctx, "-n", "default", "get", "serviceaccount", "default")
		return err == nil, fmt.Sprint(err), c.anyExited(procs)
	}); err != nil {
		return err
	}
	if out, err := c.kubectl(ctx, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s"); err != nil {
		desc, _ := c.kubectl(ctx, "-n", "kube-system", "describe", "pods", "-l", "k8s-app=kube-dns")
		return fmt.Errorf("CoreDNS did not become available: %w\n%s\n%s", err, out, lastLines(desc, 30))
	}
	phase("")
	c.Log.Info("cluster up", "took", time.Since(t0).Round(100*time.Millisecond), "kubeconfig", c.AdminKubeconfig(), "audit_log", c.AuditLog())
	return nil
}

// checkRunsc runs `runsc do true` (gVisor's own smoke test: a sandbox on
// the systrap platform, no network, the host's root file system read-only)
// and logs the result. A failure is a warning, not an error: the cluster
// serves every test that does not ask for RuntimeClass gvisor, and those
// that do fail naming the pod's events (the sandbox cannot start).
func (c Config) checkRunsc(ctx context.Context) {
	root, err := os.MkdirTemp("", "knotless-runsc-check-")
	if err != nil {
		c.Log.Warn("runsc check skipped", "err", err)
		return
	}
	defer os.RemoveAll(root)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t0 := time.Now()
	out, err := run(cctx, c.bin("runsc"), "--root", root, "--platform", "systrap", "--network", "none", "do", "true")
	if err != nil {
		c.Log.Warn("gVisor cannot run a sandbox on this machine: pods of RuntimeClass "+RuntimeClassGVisor+" will not start",
			"err", err, "output", lastLines(out, 10))
		return
	}
	c.Log.Info("runsc runs a sandbox", "platform", "systrap", "took", time.Since(t0).Round(10*time.Millisecond))
}

// ErrOtherCluster is returned by Up when another cluster holds the ports.
var ErrOtherCluster = errors.New("another cluster is running")

// ErrNotRoot is returned by Up and Down when not run as root.
var ErrNotRoot = errors.New("the test cluster needs root (it runs containerd and the kubelet, mounts, and writes netfilter rules): run it with sudo")

var errNoSource = errors.New("cannot find the harness source (test/cluster/kube/go.mod) from the working directory: run from the repository or pass --source")

// newPhases returns a function that logs the end of the previous phase
// with its duration and the start of the next ("" ends the last).
func newPhases(c Config) func(string) {
	var name string
	var start time.Time
	return func(next string) {
		if name != "" {
			c.Log.Info("phase done", "phase", name, "took", time.Since(start).Round(10*time.Millisecond))
		}
		name, start = next, time.Now()
		if next != "" {
			c.Log.Info("phase", "phase", next)
		}
	}
}

// exited returns an error naming p and the end of its log if p is no longer
// running; nil while it runs.
func (c Config) exited(p process) error {
	if c.running(p) != 0 {
		return nil
	}
	b, _ := os.ReadFile(c.logFile(p.name))
	return fmt.Errorf("%s exited; the end of %s:\n%s", p.name, c.logFile(p.name), lastLines(string(b), 20))
}

func (c Config) anyExited(procs map[string]process) error {
	for _, p := range c.processes() {
		if _, started := procs[p.name]; started && fileExists(c.pidFile(p.name)) {
			if err := c.exited(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Healthy returns nil when every process of the cluster runs (by its pid
// file), the API server answers /readyz and the node is Ready; otherwise an
// error saying what is not.
func (c Config) Healthy(ctx context.Context) error {
	for _, p := range c.processes() {
		if c.running(p) == 0 {
			return fmt.Errorf("%s is not running", p.name)
		}
	}
	if err := c.readyz(ctx); err != nil {
		return err
	}
	out, err := c.kubectl(ctx, "get", "node", c.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != "True" {
		return fmt.Errorf("node %s is not Ready", c.NodeName)
	}
	return nil
}

// readyz asks the API server's /readyz with the admin client certificate.
func (c Config) readyz(ctx context.Context) error {
	cert, err := tls.LoadX509KeyPair(c.path("pki", "admin.crt"), c.path("pki", "admin.key"))
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(c.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/readyz", APIPort), nil)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// kubectl runs our kubectl with the admin kubeconfig.
func (c Config) kubectl(ctx context.Context, args ...string) (string, error) {
	return run(ctx, c.bin("kubectl"), append([]string{"--kubeconfig", c.AdminKubeconfig(), "--request-timeout=10s"}, args...)...)
}

// kubectlApply applies a multi-document manifest (server-side apply).
func (c Config) kubectlApply(ctx context.Context, manifest string) error {
	f := c.path("addons.yaml")
	if err := writeFile(f, []byte(manifest), 0o644); err != nil {
		return err
	}
	_, err := c.kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", f)
	return err
}

// Down stops what Up started and removes the pods' leftovers (see stopAll).
// With wipe it also removes the whole state directory.
func (c Config) Down(ctx context.Context, wipe bool) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if foreign := c.foreignListener(ctx); foreign != "" {
		// Pods, the bridge and netfilter rules belong to that cluster.
		c.Log.Warn("another cluster is running: stopping only this state directory's processes", "why", foreign)
		procs := c.processes()
		for i := len(procs) - 1; i >= 0; i-- {
			c.stop(procs[i], 5*time.Second)
		}
	} else {
		c.stopAll(ctx)
	}
	if wipe {
		c.Log.Info("removing state", "dir", c.StateDir)
		if err := os.RemoveAll(c.StateDir); err != nil {
			return fmt.Errorf("wipe %s: %w", c.StateDir, err)
		}
	}
	c.Log.Info("cluster down")
	return nil
}
