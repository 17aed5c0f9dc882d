package kube

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/envflag"
)

// parseKubeFlags parses args with the kube executor's flags, each with
// its KNOTLESS_* variable bound as knotless-run binds them.
func parseKubeFlags(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	o := &Options{}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	o.AddFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) { envflag.Bind(fs, f.Name) })
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, envflag.Apply(fs)
}

// TestKubeAPIFlags_DefaultTo50And100AndReadTheCommandLineThenTheEnvironment:
// --kube-api-qps and --kube-api-burst default to DefaultQPS and
// DefaultBurst, take fractions of a request a second, and fall back to
// KNOTLESS_KUBE_API_QPS and KNOTLESS_KUBE_API_BURST, which never override
// the command line.
func TestKubeAPIFlags_DefaultTo50And100AndReadTheCommandLineThenTheEnvironment(t *testing.T) {
	o, err := parseKubeFlags(t)
	if err != nil || o.qps != 50 || o.burst != 100 {
		t.Fatalf("defaults: qps %v burst %v (%v), want 50 and 100", o.qps, o.burst, err)
	}
	if o, err = parseKubeFlags(t, "--kube-api-qps", "0.5", "--kube-api-burst", "1"); err != nil || o.qps != 0.5 || o.burst != 1 {
		t.Fatalf("command line: qps %v burst %v (%v), want 0.5 and 1", o.qps, o.burst, err)
	}
	t.Setenv("KNOTLESS_KUBE_API_QPS", "7")
	t.Setenv("KNOTLESS_KUBE_API_BURST", "9")
	if o, err = parseKubeFlags(t); err != nil || o.qps != 7 || o.burst != 9 {
		t.Fatalf("environment: qps %v burst %v (%v), want 7 and 9", o.qps, o.burst, err)
	}
	if o, err = parseKubeFlags(t, "--kube-api-qps", "3"); err != nil || o.qps != 3 || o.burst != 9 {
		t.Fatalf("command line over environment: qps %v burst %v (%v), want 3 and 9", o.qps, o.burst, err)
	}
}

// TestKubeAPIFlags_NonsenseIsAUsageErrorNamingTheFlag: a rate of 0 or
// less (client-go would read 0 as its own 5 and a negative one as no limit
// at all), not a number, infinite, or a burst under 1 is refused while the
// flags are parsed (knotless-run's usage error, exit 2), the error naming
// the flag and what it wants; from the environment, naming the variable.
func TestKubeAPIFlags_NonsenseIsAUsageErrorNamingTheFlag(t *testing.T) {
	for _, args := range [][]string{
		{"--kube-api-qps", "0"}, {"--kube-api-qps", "-1"}, {"--kube-api-qps", "fast"},
		{"--kube-api-qps", "NaN"}, {"--kube-api-qps", "+Inf"}, {"--kube-api-qps", "1e40"},
		{"--kube-api-burst", "0"}, {"--kube-api-burst", "-5"}, {"--kube-api-burst", "1.5"},
	} {
		_, err := parseKubeFlags(t, args...)
		if err == nil || !strings.Contains(err.Error(), args[0]) || !strings.Contains(err.Error(), "(default") && !strings.Contains(err.Error(), "e.g.") {
			t.Errorf("%v: %v, want an error naming %s and what it wants", args, err, args[0])
		}
	}
	t.Setenv("KNOTLESS_KUBE_API_QPS", "0")
	if _, err := parseKubeFlags(t); err == nil || !strings.Contains(err.Error(), "KNOTLESS_KUBE_API_QPS") {
		t.Errorf("KNOTLESS_KUBE_API_QPS=0: %v, want an error naming the variable", err)
	}
}

// TestRequestKind_NamesVerbAndResourceAsTheAuditLogDoes: the requests
// metric's labels come from a small set: the audit log's verbs and the
// resource (with its subresource), nonresource outside /api and /apis,
// other for what does not read as one (never a pod's name or a path).
func TestRequestKind_NamesVerbAndResourceAsTheAuditLogDoes(t *testing.T) {
	for _, c := range []struct{ method, url, verb, resource string }{
		{"POST", "/api/v1/namespaces/ci/pods", "create", "pods"},
		{"GET", "/api/v1/namespaces/ci/pods?labelSelector=a%3Db", "list", "pods"},
		{"GET", "/api/v1/namespaces/ci/pods?watch=true&resourceVersion=5", "watch", "pods"},
		{"GET", "/api/v1/namespaces/ci/pods/knotless-run-1", "get", "pods"},
		{"POST", "/api/v1/namespaces/ci/pods/knotless-run-1/exec?command=x", "create", "pods/exec"},
		{"PATCH", "/api/v1/namespaces/ci/pods/knotless-run-1", "patch", "pods"},
		{"DELETE", "/api/v1/namespaces/ci/pods/knotless-run-1", "delete", "pods"},
		{"DELETE", "/api/v1/namespaces/ci/pods", "deletecollection", "pods"},
		{"GET", "/api/v1/namespaces/ci/events", "list", "events"},
		{"POST", "/apis/networking.k8s.io/v1/namespaces/ci/networkpolicies", "create", "networkpolicies"},
		{"GET", "/api/v1/namespaces/ci", "get", "namespaces"},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "create", "selfsubjectaccessreviews"},
		{"GET", "/version", "get", "nonresource"},
		{"GET", "/api/v1/namespaces/ci/Pods%20X/a", "get", "other"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		verb, resource := requestKind(&http.Request{Method: c.method, URL: u})
		if verb != c.verb || resource != c.resource {
			t.Errorf("%s %s: %s %s, want %s %s", c.method, c.url, verb, resource, c.verb, c.resource)
		}
	}
}
