package kwok

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// KubeBinary is the local cluster's multi-call Kubernetes binary
// (test/cluster: kube-apiserver, kube-scheduler, kubectl, etcd and kwok,
// picked by argv[0]) in its default binary cache (test/cluster's
// TestCachedBinaries_DefaultCacheDir pins the same path);
// $KNOTLESS_KUBE_BINARY overrides it. `make cluster-build` builds it.
func KubeBinary() string {
	if p := os.Getenv("KNOTLESS_KUBE_BINARY"); p != "" {
		return p
	}
	return "/var/cache/knotless-test-cluster/kubernetes-v1.37.2-knotless1/kube"
}

// Token is the bearer token of the control plane's user "admin" (group
// system:masters); RunnerToken that of user "knotless-runner" and
// FloorToken that of user "bare-client-go" (the benchmark's floor: bare
// client-go doing a runner's API calls), which the audit log tells
// apart. All are for this throwaway control plane only.
const (
	Token       = "kwok-bench-admin"
	RunnerToken = "kwok-bench-runner"
	RunnerUser  = "knotless-runner"
	FloorToken  = "kwok-bench-floor"
	FloorUser   = "bare-client-go"
)

// ControlPlane is a throwaway Kubernetes control plane of its own (etcd,
// kube-apiserver, kube-scheduler on loopback ports picked at start, in one
// directory) with kwok faking its nodes and their pods: never the shared
// local cluster (test/cluster), whose tests would see the fake nodes.
type ControlPlane struct {
	// Dir holds everything: etcd's data, keys, logs, kubeconfigs.
	Dir string
	// Server is the API server's URL, https://127.0.0.1:PORT.
	Server string
	// AuditLog is the API server's audit log (JSON lines, level Metadata
	// for every request but the API server's own, stage
	// ResponseComplete).
	AuditLog string

	procs []*exec.Cmd
	done  []chan struct{}
	names []string // each process's log name (logs/NAME.log)
}

// Kubeconfig returns the path of a kubeconfig for the control plane as
// user (Token's admin or RunnerToken's runner), writing it on first use.
func (c *ControlPlane) Kubeconfig(token string) (string, error) {
	name := "admin"
	if token == RunnerToken {
		name = "runner"
	}
	path := filepath.Join(c.Dir, name+".kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kwok
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: %s
  user: {token: %q}
contexts:
- name: kwok
  context: {cluster: kwok, user: %s, namespace: %s}
current-context: kwok
`, c.Server, name, token, name, Namespace)
	return path, os.WriteFile(path, []byte(kc), 0o600)
}

// Namespace is the namespace the runners' job pods go to.
const Namespace = "ci"

// auditPolicy logs every request at level Metadata (who, verb, resource,
// code, no bodies) once it completed, but the watch-cache refreshes of the
// API server itself (system:apiserver).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  users: ["system:apiserver"]
- level: Metadata
`

// StartControlPlane starts etcd, kube-apiserver and kube-scheduler from
// kube (KubeBinary, which StartKwok also runs as kwok) on free loopback
// ports in dir, and waits until the
// API server is ready. Stop ends them. Errors: a process that does not
// start or exits, with the last lines of its log; readiness not reached
// within 90 s.
func StartControlPlane(ctx context.Context, kube, dir string) (c *ControlPlane, err error) {
	if _, err := os.Stat(kube); err != nil {
		return nil, fmt.Errorf("the Kubernetes binary: %w (`make cluster-build` builds it; KNOTLESS_KUBE_BINARY names another)", err)
	}
	c = &ControlPlane{Dir: dir, AuditLog: filepath.Join(dir, "audit.log")}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for _, d := range []string{"bin", "etcd", "certs", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return c, err
		}
	}
	for _, n := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kubectl", "kwok"} {
		if err := os.Symlink(kube, filepath.Join(dir, "bin", n)); err != nil && !errors.Is(err, os.ErrExist) {
			return c, err
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return c, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	c.Server = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	if err := c.writeFiles(); err != nil {
		return c, err
	}
	if err := c.start("etcd", "--name=kwok", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kwok="+peerURL, "--listen-metrics-urls=", "--unsafe-no-fsync", "--log-level=warn",
		"--quota-backend-bytes=8589934592"); err != nil {
		return c, err
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	if err := c.start("kube-apiserver", "--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[2]),
		// No Service "kubernetes" endpoints: nothing here dials it, and the
		// reconciler refuses a loopback address.
		"--endpoint-reconciler-type=none",
		// No node lifecycle controller (kube-controller-manager) would
		// lift the not-ready taint it puts on each new node.
		"--disable-admission-plugins=TaintNodesByCondition",
		"--cert-dir="+p("certs"), "--token-auth-file="+p("tokens.csv"), "--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.255.0.0/16", "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p("sa.key"), "--service-account-signing-key-file="+p("sa.key"),
		"--audit-policy-file="+p("audit-policy.yaml"), "--audit-log-path="+c.AuditLog, "--audit-log-format=json",
		"--audit-log-maxsize=2000", "--audit-log-mode=batch", "--profiling=false",
		// kwok's server, the fake nodes' "kubelet", has a self-signed certificate.
		"--kubelet-preferred-address-types=InternalIP"); err != nil {
		return c, err
	}
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}
	kc, err := c.Kubeconfig(Token)
	if err != nil {
		return c, err
	}
	// --secure-port=0: no serving port, so none clashes with the local
	// cluster's scheduler (10259).
	if err := c.start("kube-scheduler", "--kubeconfig="+kc, "--leader-elect=false", "--secure-port=0", "--profiling=false"); err != nil {
		return c, err
	}
	return c, nil
}

// writeFiles writes the token file, the service-account key and the audit
// policy.
func (c *ControlPlane) writeFiles() error {
	tokens := Token + ",admin,admin,system:masters\n" + RunnerToken + "," + RunnerUser + "," + RunnerUser + ",system:masters\n" +
		FloorToken + "," + FloorUser + "," + FloorUser + ",system:masters\n"
	if err := os.WriteFile(filepath.Join(c.Dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	if err := os.WriteFile(filepath.Join(c.Dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "audit-policy.yaml"), []byte(auditPolicy), 0o600)
}

// start runs bin/NAME (argv[0] NAME, which picks the multi-call binary's
// program) in its own process group, output to logs/NAME.log.
func (c *ControlPlane) start(name string, args ...string) error {
	return c.start2(name, filepath.Join(c.Dir, "bin", name), args...)
}

// start2 runs path with args as the process NAME (its log logs/NAME.log,
// its name in Exited's errors): start's programs, and kwok behind unshare.
func (c *ControlPlane) start2(name, path string, args ...string) error {
	cmd, done, err := startLogged(path, filepath.Join(c.Dir, "logs", name+".log"), nil, args...)
	if err != nil {
		return err
	}
	c.procs, c.done, c.names = append(c.procs, cmd), append(c.done, done), append(c.names, name)
	return nil
}

// Exited returns nil while every process of the control plane (kwok
// among them) runs, else an error naming the first that exited, with
// the last lines of its log: a wait on what one of them does (a node
// Ready, a pod Running) calls it so that it ends at once, not at its
// deadline.
func (c *ControlPlane) Exited() error {
	for i, d := range c.done {
		select {
		case <-d:
			return fmt.Errorf("%s exited: %s", c.names[i], c.LogTail(c.names[i]))
		default:
		}
	}
	return nil
}

// startLogged starts path with args (argv[0] the path's base name) and
// env added, output appended to logPath, in its own process group; done
// closes when it exits.
func startLogged(path, logPath string, env []string, args ...string) (*exec.Cmd, chan struct{}, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	cmd := exec.Command(path, args...)
	cmd.Args[0] = filepath.Base(path)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", path, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd, done, nil
}

// waitReady polls /readyz until it answers 200.
func (c *ControlPlane) waitReady(ctx context.Context) error {
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+Token)
		resp, err := cl.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := c.Exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("kube-apiserver %s not ready in 90 s (%v): %s", c.Server, err, c.LogTail("kube-apiserver"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// LogTail returns the last lines of logs/NAME.log.
func (c *ControlPlane) LogTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "logs", name+".log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// Kubectl runs the control plane's kubectl as admin with args and
// returns its output. Errors: its exit, with its output.
func (c *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	kc, err := c.Kubeconfig(Token)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.Dir, "bin", "kubectl"), append([]string{"--kubeconfig", kc}, args...)...)
	cmd.Args[0] = "kubectl"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Stop ends every process it started, the last first (SIGTERM to its
// process group, SIGKILL after 5 s). It may be called more than once.
func (c *ControlPlane) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		stopGroup(c.procs[i], c.done[i])
	}
	c.procs, c.done, c.names = nil, nil, nil
}

func stopGroup(cmd *exec.Cmd, done chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// freePorts returns n loopback ports free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// selfSigned writes a self-signed ECDSA certificate for 127.0.0.1 and its
// key to certFile and keyFile (kwok's server: the fake nodes' kubelet
// endpoint, which the API server dials without checking it).
func selfSigned(certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kwok"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}
