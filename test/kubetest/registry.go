package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Registry is a container registry (distribution's, which test/cluster
// builds: StateDir/bin/registry) that a test started on this host at
// HostIP:port, where pods and the kubelet reach it, with basic auth (a
// bcrypt htpasswd file) over TLS with a certificate of its own. BuildKit
// pushes to it with registry.insecure=true (the certificate is nobody's);
// the cluster's containerd pulls from it with a hosts.toml that skips
// verification, given a pull secret (PullSecret).
type Registry struct {
	// Addr is HOST:PORT.
	Addr, User, Password string
	cmd                  *exec.Cmd
}

// Registry starts a registry for the test (stopped, its hosts.toml
// removed, when the test ends).
func (c *Cluster) Registry(t testing.TB) *Registry {
	t.Helper()
	bin := filepath.Join(c.StateDir, "bin", "registry")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the tests' registry: %v (test/cluster builds it: make cluster-down cluster-up)", err)
	}
	host := c.HostIP(t)
	l, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	r := &Registry{Addr: addr, User: "builder", Password: randomWord(t)}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	htpasswd := write("htpasswd", []byte(r.User+":"+string(hash)+"\n"))
	certPEM, keyPEM := selfSigned(t, net.ParseIP(host))
	cert, key := write("cert.pem", certPEM), write("key.pem", keyPEM)
	config := write("config.yml", fmt.Appendf(nil, `version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  tls:
    certificate: %s
    key: %s
auth:
  htpasswd:
    realm: knotless-test
    path: %s
`, filepath.Join(dir, "data"), addr, cert, key, htpasswd))
	r.cmd = exec.Command(bin, "serve", config)
	r.cmd.Stdout, r.cmd.Stderr = os.Stderr, os.Stderr
	// No OpenTelemetry exporter: there is no collector to send traces to.
	r.cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start the registry: %v", err)
	}
	t.Cleanup(func() { r.Stop() })
	hosts := filepath.Join(c.StateDir, "certs.d", addr)
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hosts) })
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), fmt.Appendf(nil, "server = \"https://%s\"\n\n[host.\"https://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n", addr, addr), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry does not listen at %s within 30 s", addr)
		}
	}
	return r
}

// Stop ends the registry (a registry that is down, for a test).
func (r *Registry) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// DockerConfig is a Docker config.json giving password for the
// registry's user: what buildctl reads from $DOCKER_CONFIG or
// ~/.docker/config.json, and a kubernetes.io/dockerconfigjson Secret's
// data.
func (r *Registry) DockerConfig(password string) []byte {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{r.Addr: map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(r.User + ":" + password)),
	}}})
	return b
}

// PullSecret creates in namespace an image pull Secret for the registry
// and returns its name.
func (c *Cluster) PullSecret(t testing.TB, namespace string, r *Registry) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Client.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "registry-", Labels: map[string]string{TestLabel: "kubetest"}},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: r.DockerConfig(r.Password)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the registry's pull secret: %v", err)
	}
	return s.Name
}

func randomWord(t testing.TB) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// selfSigned is a certificate (and its key) for ip, valid for a day.
func selfSigned(t testing.TB, ip net.IP) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "knotless test registry"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{ip},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
