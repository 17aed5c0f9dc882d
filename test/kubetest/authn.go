package kubetest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// AuthenticationConfigFile is the API server's structured authentication
// configuration (--authentication-config), relative to the state
// directory; test/cluster writes it with no JWT issuer at `cluster up`,
// and the API server reloads it when it changes.
const AuthenticationConfigFile = "authn/authentication-config.yaml"

// authnHead starts the configuration; issuer blocks follow, each between
// "# begin ISSUER" and "# end ISSUER" lines.
const authnHead = `apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
`

// lastConfigInfo is the API server's metric saying which configuration it
// applied last: hash="sha256:<hex of the file>".
var lastConfigInfo = regexp.MustCompile(`apiserver_authentication_config_controller_last_config_info\{[^}]*hash="sha256:([0-9a-f]+)"`)

// TrustIssuer makes the local cluster's API server trust a JWT issuer:
// jwt is one entry of an AuthenticationConfiguration's jwt list
// (apiserver.config.k8s.io/v1), YAML starting "- issuer:" as
// docs/oidc.md writes it, for the issuer at issuerURL. It adds the
// entry to the cluster's authentication configuration (under a lock:
// tests of several processes add theirs at once; entries whose issuer no
// longer answers, left by a test that died, are removed, since one issuer
// the API server cannot reach keeps it from loading any change), waits
// until the API server has loaded a configuration holding it (its
// last_config_info metric names the file's hash), and removes it when the
// test ends.
//
// The API server must have been started with --authentication-config by
// the current harness: otherwise the test fails (skips without
// KNOTLESS_TEST_CLUSTER_REQUIRED=1) saying to restart the cluster.
func (c *Cluster) TrustIssuer(t testing.TB, issuerURL, jwt string) {
	t.Helper()
	path := filepath.Join(c.StateDir, AuthenticationConfigFile)
	metrics, err := c.apiMetrics(t)
	if _, serr := os.Stat(path); serr != nil || err != nil || !strings.Contains(metrics, "apiserver_authentication_config_controller_last_config_info") {
		msg := fmt.Sprintf("the cluster's API server was not started with --authentication-config=%s by the current test/cluster harness (%v, %v): restart the cluster with it: make cluster-down cluster-up", path, serr, err)
		if os.Getenv(EnvRequired) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if !strings.HasPrefix(strings.TrimSpace(jwt), "- issuer:") {
		t.Fatalf("TrustIssuer: jwt must be one list entry starting with \"- issuer:\", got:\n%s", jwt)
	}
	block := "# begin " + issuerURL + "\n" + strings.TrimRight(jwt, "\n") + "\n# end " + issuerURL + "\n"
	c.editAuthn(t, path, func(blocks map[string]string) { blocks[issuerURL] = block })
	t.Cleanup(func() {
		c.editAuthn(t, path, func(blocks map[string]string) { delete(blocks, issuerURL) })
	})
	deadline := time.Now().Add(4 * time.Minute)
	last := ""
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), "# begin "+issuerURL+"\n") {
			want := fmt.Sprintf("%x", sha256.Sum256(b))
			m, merr := c.apiMetrics(t)
			if merr == nil {
				for _, h := range lastConfigInfo.FindAllStringSubmatch(m, -1) {
					if h[1] == want {
						return
					}
				}
				last = strings.Join(grepLines(m, "apiserver_authentication_config_controller"), "\n")
			} else {
				last = merr.Error()
			}
		}
		if time.Now().After(deadline) {
			logTail := grepLines(tailFile(filepath.Join(c.StateDir, "logs", "kube-apiserver.log"), 400), "authentication config")
			t.Fatalf("the API server did not load the authentication configuration trusting %s within 4 minutes (it reloads on change, and waits until every issuer's discovery answers)\nits metrics:\n%s\nits log:\n%s",
				issuerURL, last, strings.Join(logTail, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// editAuthn rewrites the authentication configuration under its lock:
// edit changes the issuer blocks (by issuer URL); blocks whose issuer does
// not answer its discovery any more are dropped first.
func (c *Cluster) editAuthn(t testing.TB, path string, edit func(blocks map[string]string)) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(path), ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("lock the authentication configuration: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock the authentication configuration: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the authentication configuration: %v", err)
	}
	blocks := parseAuthnBlocks(string(b))
	for iss := range blocks {
		if !issuerAnswers(iss) {
			delete(blocks, iss)
		}
	}
	edit(blocks)
	var out strings.Builder
	out.WriteString(authnHead)
	if len(blocks) == 0 {
		out.Reset()
		out.WriteString(strings.TrimSuffix(authnHead, "\n") + " []\n")
	}
	for _, iss := range slices.Sorted(maps.Keys(blocks)) {
		out.WriteString(blocks[iss])
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(out.String()), 0o644); err != nil {
		t.Fatalf("write the authentication configuration: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("write the authentication configuration: %v", err)
	}
}

// parseAuthnBlocks returns the issuer blocks of a configuration TrustIssuer
// wrote, by issuer URL.
func parseAuthnBlocks(s string) map[string]string {
	out := map[string]string{}
	var cur string
	var buf strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		switch {
		case strings.HasPrefix(line, "# begin "):
			cur = strings.TrimSpace(strings.TrimPrefix(line, "# begin "))
			buf.Reset()
			buf.WriteString(line)
		case cur != "" && strings.HasPrefix(line, "# end "):
			buf.WriteString(line)
			out[cur] = buf.String()
			cur = ""
		case cur != "":
			buf.WriteString(line)
		}
	}
	return out
}

// issuerAnswers reports whether an issuer's discovery document answers
// (any TLS certificate: only liveness matters here).
func issuerAnswers(issuer string) bool {
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a liveness probe of a test's issuer
	resp, err := client.Get(strings.TrimRight(issuer, "/") + "/.well-known/openid-configuration")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// apiMetrics reads the API server's /metrics with the admin client.
func (c *Cluster) apiMetrics(t testing.TB) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	return string(b), err
}

func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

func tailFile(path string, lines int) string {
	b, _ := os.ReadFile(path)
	ls := strings.Split(string(b), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
