package kube

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/metrics"
)

// DefaultQPS and DefaultBurst bound the kube executor's API requests
// (client-go's token bucket, one per executor, shared by all its runs):
// on average DefaultQPS requests a second, up to DefaultBurst at once.
// A run sends two rate-limited requests (its pod's create and delete;
// the exec stream and the runner's one watch are not held), so 50/100
// let 100 runs claimed at once create their pods without waiting and
// then 25 runs a second start and end, where client-go's own 5 and 10
// would hold the last of 20 claimed at once some 2 s (docs/kubernetes.md).
const (
	DefaultQPS   = 50
	DefaultBurst = 100
)

// throttleNoteAfter is how long a run's API requests may wait in total
// for the client-side rate limiter before its setup log says so
// (client-go's own "extra long" throttle is 1 s too).
const throttleNoteAfter = time.Second

// instrument makes rc's requests measured: a client-side rate limiter of
// rc.QPS and rc.Burst (a token bucket, as client-go makes) whose waits
// are observed, and a transport that counts every request, in
// metrics.KubeClient and in the account of the run whose context the
// request carries (withRunAccount). rc.QPS < 0 keeps client-go's
// meaning: no rate limit. A config instrumented already is left alone,
// so that one limiter is shared by the configs copied from it.
func instrument(rc *rest.Config) {
	if _, ok := rc.RateLimiter.(*measuredLimiter); ok {
		return
	}
	if rc.RateLimiter == nil && rc.QPS > 0 {
		burst := max(rc.Burst, 1)
		rc.RateLimiter = &measuredLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(rc.QPS, burst), qps: rc.QPS, burst: burst}
	}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt} })
}

// measuredLimiter is a flowcontrol.RateLimiter whose Wait observes how
// long each request waited.
type measuredLimiter struct {
	flowcontrol.RateLimiter
	qps   float32
	burst int
}

// Wait waits as the token bucket says, then observes the wait in
// metrics.KubeClient.ThrottleWait and in ctx's run account.
func (l *measuredLimiter) Wait(ctx context.Context) error {
	t0 := time.Now()
	err := l.RateLimiter.Wait(ctx)
	d := time.Since(t0)
	metrics.KubeClient.ThrottleWait.WithLabelValues().Observe(d.Seconds())
	if a := accountOf(ctx); a != nil {
		a.waited(d)
	}
	return err
}

// countingTransport counts each request by verb, resource and code, and
// notes a 429 in its run's account.
type countingTransport struct{ rt http.RoundTripper }

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	code := "error"
	if err == nil {
		code = metrics.Code(resp.StatusCode)
	}
	verb, resource := requestKind(req)
	metrics.KubeClient.Requests.WithLabelValues(verb, resource, code).Inc()
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		if a := accountOf(req.Context()); a != nil {
			a.rejected(resp.Header)
		}
	}
	return resp, err
}

// resourceName is what a resource label may be: a resource, with its
// subresource.
var resourceName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,62}(/[a-z]{1,30})?$`)

// requestKind names an API request as the API server's audit log does:
// its verb (from the method, the name and ?watch) and its resource
// (pods/exec for a subresource; nonresource for paths outside /api and
// /apis; other for what does not read as a resource).
func requestKind(req *http.Request) (verb, resource string) {
	segs := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(segs) >= 3 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 4 && segs[0] == "apis":
		segs = segs[3:]
	default:
		return strings.ToLower(req.Method), "nonresource"
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	resource, name := segs[0], ""
	if len(segs) > 1 {
		name = segs[1]
	}
	if len(segs) > 2 {
		resource += "/" + segs[2]
	}
	if !resourceName.MatchString(resource) {
		resource = "other"
	}
	switch req.Method {
	case http.MethodGet:
		if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
			return "watch", resource
		}
		if name == "" {
			return "list", resource
		}
		return "get", resource
	case http.MethodPost:
		return "create", resource
	case http.MethodPut:
		return "update", resource
	case http.MethodPatch:
		return "patch", resource
	case http.MethodDelete:
		if name == "" {
			return "deletecollection", resource
		}
		return "delete", resource
	}
	return "other", resource
}

// runAccount adds up what made one run's API requests wait. Safe for
// concurrent use.
type runAccount struct {
	mu sync.Mutex
	f  throttleFacts
}

// throttleFacts are what a runAccount added up.
type throttleFacts struct {
	wait       time.Duration // in the client-side rate limiter
	waits      int           // requests that waited at all (over a millisecond)
	refusals   int           // 429 answers
	retryAfter time.Duration // their Retry-After, summed
	level      string        // the APF priority level's UID a 429 named
}

func (a *runAccount) waited(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.f.wait += d
	if d > time.Millisecond {
		a.f.waits++
	}
}

func (a *runAccount) rejected(h http.Header) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.f.refusals++
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		a.f.retryAfter += time.Duration(s) * time.Second
	}
	if uid := h.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID); uid != "" {
		a.f.level = uid
	}
}

// facts returns what a added up so far.
func (a *runAccount) facts() throttleFacts {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.f
}

type runAccountKey struct{}

// withRunAccount returns ctx carrying a: the API requests made with it
// (and contexts derived from it) add to a.
func withRunAccount(ctx context.Context, a *runAccount) context.Context {
	return context.WithValue(ctx, runAccountKey{}, a)
}

// accountOf is ctx's run account, nil for none.
func accountOf(ctx context.Context) *runAccount {
	a, _ := ctx.Value(runAccountKey{}).(*runAccount)
	return a
}

// notes are the setup-log lines a run's account calls for: one
// when the client-side rate limiter held its requests more than
// throttleNoteAfter in total, one when the API server answered 429 to
// any. lim is the executor's limiter (nil: none).
func (a throttleFacts) notes(lim *measuredLimiter) (client, apf string) {
	if a.wait > throttleNoteAfter && lim != nil {
		client = fmt.Sprintf("waited %s for client-side throttling: %d of this run's API requests waited for the runner's own rate limit (--kube-api-qps %g, --kube-api-burst %d, shared by all its runs; knotless_runner_kube_client_throttle_seconds); raise them if the API server has room (docs/kubernetes.md)",
			a.wait.Round(10*time.Millisecond), a.waits, lim.qps, lim.burst)
	}
	if a.refusals > 0 {
		by := "the API server's max-in-flight limit (its answers named no priority level)"
		if a.level != "" {
			by = "API Priority and Fairness (priority level UID " + a.level + ")"
		}
		apf = fmt.Sprintf("the API server made this run wait: it answered %d of its API requests 429 Too Many Requests, by %s, asking for %s in all (Retry-After) before they were sent again; the FlowSchema matching the runner's identity decides its share (docs/kubernetes.md)",
			a.refusals, by, a.retryAfter)
	}
	return client, apf
}

// accountedDriver is the kube executor's driver whose Make accounts for
// what made the run's API requests wait, and says so in its setup log.
type accountedDriver struct{ *driver }

var _ agentenv.Driver = accountedDriver{}

// Make is driver.Make with a run account in ctx; after it, the setup log
// says when the client-side rate limiter or the API server (429) made
// the run wait (notes), on success and on error alike.
func (d accountedDriver) Make(ctx context.Context, spec executor.Spec, serve agent.Serve) (*agentenv.Env, error) {
	a := &runAccount{}
	env, err := d.driver.Make(withRunAccount(ctx, a), spec, serve)
	e := (*Executor)(d.driver)
	lim, _ := e.rest.RateLimiter.(*measuredLimiter)
	f := a.facts()
	client, apf := f.notes(lim)
	if client != "" {
		e.logf(spec, "%s", client)
		e.log.Info("a run waited for client-side throttling", "run", spec.ID, "wait", f.wait.Round(time.Millisecond))
		metrics.KubeClient.ThrottledRuns.WithLabelValues("client").Inc()
	}
	if apf != "" {
		e.logf(spec, "%s", apf)
		e.log.Info("the API server answered a run's requests 429 Too Many Requests", "run", spec.ID, "refusals", f.refusals, "priority_level_uid", f.level)
		metrics.KubeClient.ThrottledRuns.WithLabelValues("apf").Inc()
	}
	return env, err
}

// qpsValue is --kube-api-qps: requests a second, a finite number over 0
// (client-go reads 0 as its default 5 and a negative one as no limit;
// neither is what a runner's operator means).
type qpsValue float32

func (q *qpsValue) String() string { return strconv.FormatFloat(float64(*q), 'g', -1, 32) }
func (q *qpsValue) Type() string   { return "float" }

func (q *qpsValue) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 32)
	if err != nil {
		return fmt.Errorf("want a number of requests a second, e.g. 20 or 0.5")
	}
	v := qpsValue(f)
	if err := v.check(); err != nil {
		return err
	}
	*q = v
	return nil
}

func (q qpsValue) check() error {
	if !(q > 0) || math.IsInf(float64(q), 0) {
		return fmt.Errorf("the most API requests a second must be a number over 0 (default %d)", DefaultQPS)
	}
	return nil
}

// burstValue is --kube-api-burst: requests, at least 1.
type burstValue int

func (b *burstValue) String() string { return strconv.Itoa(int(*b)) }
func (b *burstValue) Type() string   { return "int" }

func (b *burstValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want a whole number of requests, e.g. 100")
	}
	v := burstValue(n)
	if err := v.check(); err != nil {
		return err
	}
	*b = v
	return nil
}

func (b burstValue) check() error {
	if b < 1 {
		return fmt.Errorf("the most API requests sent at once must be at least 1 (default %d)", DefaultBurst)
	}
	return nil
}
