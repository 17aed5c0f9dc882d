package cluster

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is how long every certificate of the test cluster is valid.
const certValidity = 365 * 24 * time.Hour

// clientCert names one client certificate: the API server reads the user
// from CN and the groups from O (Kubernetes x509 client authentication).
type clientCert struct {
	file string // base name under pki/
	cn   string
	orgs []string
}

func (c Config) clientCerts() []clientCert {
	return []clientCert{
		{"admin", "knotless-admin", []string{"system:masters"}},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}},
		{"controller-manager", "system:kube-controller-manager", nil},
		{"scheduler", "system:kube-scheduler", nil},
		{"kubelet", "system:node:" + c.NodeName, []string{"system:nodes"}},
		{"kube-proxy", "system:kube-proxy", nil},
		{"network-policies", "knotless:kube-network-policies", nil},
	}
}

// ensurePKI writes pki/ca.{crt,key}, pki/apiserver.{crt,key}, one client
// certificate per clientCerts entry and the service-account key pair
// pki/sa.{key,pub}. Existing files are kept unless pki/node (the node name
// and IP they were made for) differs, so kubeconfigs stay valid across ups.
func (c Config) ensurePKI() error {
	dir := c.path("pki")
	stamp := c.NodeName + " " + c.NodeIP + "\n"
	if b, err := os.ReadFile(filepath.Join(dir, "node")); err == nil && string(b) == stamp {
		if _, err := os.Stat(filepath.Join(dir, "sa.pub")); err == nil {
			return nil
		}
	}
	c.Log.Info("writing PKI", "dir", dir, "node", c.NodeName, "ip", c.NodeIP)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, caCert, err := newCA()
	if err != nil {
		return err
	}
	if err := writeKeyPair(dir, "ca", caKey, caCert); err != nil {
		return err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc." + ClusterDomain, "localhost", c.NodeName},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(c.NodeIP), net.ParseIP(APIServiceIP)},
	}
	if err := issue(dir, "apiserver", serving, caKey, caCert); err != nil {
		return err
	}
	for _, cc := range c.clientCerts() {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: cc.cn, Organization: cc.orgs},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if err := issue(dir, cc.file, tmpl, caKey, caCert); err != nil {
			return err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.key"), keyPEM(saKey)); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "node"), []byte(stamp), 0o600)
}

func newCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "knotless-test-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

// issue signs tmpl with the CA and writes NAME.crt and NAME.key.
func issue(dir, name string, tmpl *x509.Certificate, caKey crypto.Signer, ca *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(certValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("issue %s certificate: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	return writeKeyPair(dir, name, key, cert)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

func keyPEM(key *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func writeKeyPair(dir, name string, key *ecdsa.PrivateKey, cert *x509.Certificate) error {
	if err := writePEM(filepath.Join(dir, name+".key"), keyPEM(key)); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

func writePEM(path string, b []byte) error { return writeFile(path, b, 0o600) }

// writeFile writes b to path through a temporary file and a rename, creating
// the parent directory, so a reader never sees half a file.
func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return os.Chmod(path, mode)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
