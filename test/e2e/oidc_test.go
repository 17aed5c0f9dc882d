package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testwait"
)

// tlsFront is a TLS reverse proxy in front of a knotless-server, as an
// operator puts one (README: "Put TLS in front of it"): an https issuer
// is what relying parties, the Kubernetes API server first, accept. Its
// certificate for 127.0.0.1 is signed by a CA of the test's own.
type tlsFront struct {
	url    string // https://127.0.0.1:PORT
	caFile string // the CA's certificate, PEM
	caPEM  []byte
	client *http.Client // trusts the CA
	ln     net.Listener
}

// newTLSFront listens on 127.0.0.1, port 0; serve starts proxying.
func newTLSFront(t testing.TB) *tlsFront {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "knotless e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFront{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	f.caFile = filepath.Join(t.TempDir(), "front-ca.pem")
	if err := os.WriteFile(f.caFile, f.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	f.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	cert := tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.ln = tls.NewListener(inner, &tls.Config{Certificates: []tls.Certificate{cert}})
	f.url = "https://" + inner.Addr().String()
	return f
}

// serve proxies to backend (http://HOST:PORT) until the test ends.
func (f *tlsFront) serve(t testing.TB, backend string) {
	t.Helper()
	srv := &http.Server{Handler: servertest.Proxy(backend, nil), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(f.ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// freePort returns a TCP port of 127.0.0.1 free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// oidcWorld is a world whose server is an https issuer behind a tlsFront
// (--url is the front's URL); every process trusts the front's CA.
func oidcWorld(t testing.TB, lease time.Duration) (*world, *tlsFront) {
	t.Helper()
	front := newTLSFront(t)
	port := freePort(t)
	front.serve(t, "http://127.0.0.1:"+port)
	env := []string{"SSL_CERT_FILE=" + front.caFile, "GIT_SSL_CAINFO=" + front.caFile}
	w := newWorldWith(t, "127.0.0.1:"+port, lease, env, front.client, "--url", front.url)
	if w.url != front.url {
		t.Fatalf("the server says it answers at %s, want its --url %s", w.url, front.url)
	}
	return w, front
}

// gateTokenWorkflow's step 1 gets DEPLOY (audience https://kube.example,
// lifetime 1m), prints it (the log must mask it), leaves it in
// $GATE/token for the test (a directory of the test's, outside the
// server's and the runner's) and waits for $GATE/release; step 2 does not
// ask for it.
const gateTokenWorkflow = `on:
  push: {}
id-tokens:
  DEPLOY: {aud: https://kube.example, lifetime: 1m}
steps:
  - name: deploy
    id-tokens: [DEPLOY]
    run: |
      echo "token: $DEPLOY"
      printf %s "$DEPLOY" > "$GATE/token.tmp" && mv "$GATE/token.tmp" "$GATE/token"
      touch "$GATE/started"
      while [ ! -e "$GATE/release" ]; do sleep 0.05; done
  - name: not-asked
    run: |
      echo "token: ${DEPLOY-unset}"
`

// gateToken waits for the token step 1 of gateTokenWorkflow left and
// removes the file.
func (w *world) gateToken(run int64) string {
	w.t.Helper()
	w.waitGate(run, "started", 60*time.Second)
	p := filepath.Join(w.gate, "token")
	b, err := os.ReadFile(p)
	if err != nil {
		w.t.Fatal(err)
	}
	os.Remove(p)
	os.Remove(filepath.Join(w.gate, "started"))
	return string(b)
}

// claimsOf decodes a JWT's payload without checking it.
func claimsOf(t testing.TB, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	var b []byte
	b, err := jsonB64(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// kidOf is a JWT's header "kid".
func kidOf(t testing.TB, tok string) string {
	t.Helper()
	b, err := jsonB64(strings.Split(tok, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]string
	_ = json.Unmarshal(b, &h)
	return h["kid"]
}

// verifier is a go-oidc relying party of audience aud that discovers the
// issuer afresh (no keys cached) and checks times at now.
func verifier(t testing.TB, front *tlsFront, issuer, aud string, now time.Time) *oidc.IDTokenVerifier {
	t.Helper()
	ctx := oidc.ClientContext(context.Background(), front.client)
	p, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatalf("discover %s: %v", issuer, err)
	}
	return p.Verifier(&oidc.Config{ClientID: aud, Now: func() time.Time { return now }})
}

func verify(front *tlsFront, v *oidc.IDTokenVerifier, tok string) error {
	_, err := v.Verify(oidc.ClientContext(context.Background(), front.client), tok)
	return err
}

// A standard relying party (go-oidc) discovers the https issuer, fetches
// its keys and verifies a step's token through the real programs. After
// `knotless-server oidc-keys rotate` (the server running), the token
// signed before verifies until it expires and none after; a new run's
// token is signed by the new key; once the grace ends, the old key is
// unpublished and its token is refused even before it expires.
func TestOIDC_RelyingPartyVerifiesAndRotationKeepsOldTokensUntilTheyExpire(t *testing.T) {
	t.Parallel()
	w, front := oidcWorld(t, 30*time.Second)
	rid := w.registerRunner("oidc-rp")
	w.startRunner(rid)
	run := w.pushOne(map[string]string{".knotless/workflows/deploy.yml": gateTokenWorkflow})
	tok := w.gateToken(run.ID)
	w.openGate("release")
	c := claimsOf(t, tok)
	iat, exp := time.Unix(int64(c["iat"].(float64)), 0), time.Unix(int64(c["exp"].(float64)), 0)
	if exp.Sub(iat) != time.Minute || c["sub"] != "repo:admin/app:ref:refs/heads/main" || c["iss"] != front.url {
		t.Fatalf("claims %v", c)
	}
	if err := verify(front, verifier(t, front, w.url, "https://kube.example", iat.Add(time.Second)), tok); err != nil {
		t.Fatalf("a fresh token does not verify: %v", err)
	}
	if err := verify(front, verifier(t, front, w.url, "https://vault.example", iat.Add(time.Second)), tok); err == nil {
		t.Errorf("a relying party of another audience accepted the token")
	}

	// Rotate while the server runs: the old key stays published for 20 s.
	out, err := exec.Command(serverBin(), "oidc-keys", "rotate", "--data", w.data, "--grace", "20s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "retired key "+kidOf(t, tok)) {
		t.Fatalf("oidc-keys rotate: %v\n%s", err, out)
	}
	v := verifier(t, front, w.url, "https://kube.example", exp.Add(-time.Second))
	if err := verify(front, v, tok); err != nil {
		t.Errorf("after the rotation, the token signed before it does not verify before it expires: %v", err)
	}
	if err := verify(front, verifier(t, front, w.url, "https://kube.example", exp.Add(time.Second)), tok); err == nil {
		t.Errorf("the token verifies after it expired")
	}
	w.waitFinal(run.ID, time.Minute)
	run2 := w.pushOne(map[string]string{"again": "1"})
	tok2 := w.gateToken(run2.ID)
	w.openGate("release")
	if kidOf(t, tok2) == kidOf(t, tok) {
		t.Errorf("a token made after the rotation is signed by the old key %s", kidOf(t, tok))
	}
	iat2 := time.Unix(int64(claimsOf(t, tok2)["iat"].(float64)), 0)
	if err := verify(front, verifier(t, front, w.url, "https://kube.example", iat2.Add(time.Second)), tok2); err != nil {
		t.Errorf("a token of the new key does not verify: %v", err)
	}
	// Past the grace the JWKS no longer has the old key.
	testwait.Until(t, time.Minute, "the old key to leave the JWKS", func() (bool, string) {
		resp, err := front.client.Get(w.url + "/.well-known/jwks.json")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var ks struct{ Keys []struct{ Kid string } }
		_ = json.NewDecoder(resp.Body).Decode(&ks)
		for _, k := range ks.Keys {
			if k.Kid == kidOf(t, tok) {
				return false, "still published"
			}
		}
		return true, ""
	})
	if err := verify(front, verifier(t, front, w.url, "https://kube.example", iat.Add(time.Second)), tok); err == nil {
		t.Errorf("a token of the rotated-out key verifies after its grace")
	}
	w.waitFinal(run2.ID, time.Minute)
}

// While a step holds its id token, the token is in no process's command
// line and not in the server's or the runner's environment; it is masked
// in the step's log, absent from a step that did not ask, and in no file
// of the server's data directory or the runner's state and work
// directories, nor in their logs.
func TestOIDC_TokenIsInNoCommandLineEnvironmentFileOrLog(t *testing.T) {
	t.Parallel()
	w, _ := oidcWorld(t, 30*time.Second)
	rid := w.registerRunner("oidc-leak")
	runner := w.startRunner(rid)
	run := w.pushOne(map[string]string{".knotless/workflows/deploy.yml": gateTokenWorkflow})
	tok := w.gateToken(run.ID)
	if len(tok) < 200 || strings.Count(tok, ".") != 2 {
		t.Fatalf("the step's DEPLOY is no JWT: %d bytes", len(tok))
	}
	for pid, cmdline := range procFiles("cmdline") {
		if bytes.Contains(cmdline, []byte(tok)) {
			t.Errorf("/proc/%d/cmdline holds the token: %q", pid, cmdline)
		}
	}
	environs := procFiles("environ")
	for _, p := range []*proc{w.server, runner} {
		if bytes.Contains(environs[p.pid()], []byte(tok)) {
			t.Errorf("the environment of %s holds the token", p.name)
		}
	}
	holders := 0
	for _, env := range environs {
		if bytes.Contains(env, []byte("DEPLOY="+tok)) {
			holders++
		}
	}
	if holders == 0 {
		t.Errorf("no process has DEPLOY in its environment while the step runs")
	}
	w.openGate("release")
	if final := w.waitFinal(run.ID, time.Minute); final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded", describe(final))
	}
	if log := w.stepLog(run.ID, 1); !strings.Contains(log, "token: ***\n") || strings.Contains(log, tok) {
		t.Errorf("step 1 log does not mask the token:\n%s", log)
	}
	if log := w.stepLog(run.ID, 2); log != "token: unset\n" {
		t.Errorf("the step that did not ask: %q", log)
	}
	runner.signal(t, syscall.SIGTERM)
	runner.wait(t, time.Minute)
	grepTree(t, w.data, tok)
	grepTree(t, rid.work, tok)
	if b, err := os.ReadFile(rid.state); err != nil || bytes.Contains(b, []byte(tok)) {
		t.Errorf("the runner's state file holds the token (%v)", err)
	}
	for _, p := range []*proc{w.server, runner} {
		if strings.Contains(p.output(), tok) {
			t.Errorf("the log of %s holds the token", p.name)
		}
	}
	if !strings.Contains(w.server.output(), `msg="id tokens issued" run=`+strconv.FormatInt(run.ID, 10)) {
		t.Errorf("the server's log does not say it issued the run's tokens")
	}
}

// jsonB64 decodes one base64url part of a JWT.
func jsonB64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
