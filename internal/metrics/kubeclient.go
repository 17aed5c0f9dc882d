package metrics

import "github.com/prometheus/client_golang/prometheus"

// KubeClientMetrics are the kube executor's Kubernetes API client
// metrics (knotless_runner_kube_*). Safe for concurrent use.
type KubeClientMetrics struct {
	// Requests counts the API requests sent, each try of a retried one,
	// by verb (get, list, watch, create, update, patch, delete,
	// deletecollection, as the API server's audit log names them from
	// the HTTP method), resource (pods, pods/exec, events,
	// networkpolicies, ...; nonresource for /version and the like;
	// other for what does not read as a resource) and code (Code of the
	// HTTP status, "error" when no answer came).
	Requests *prometheus.CounterVec
	// ThrottleWait observes, in seconds, how long each request waited
	// for the client's own rate limiter (--kube-api-qps, --kube-api-burst)
	// before it was sent, 0 included: its sum is the seconds waited, its
	// count the requests that went through the limiter. No labels
	// (WithLabelValues()): a vector, so that it shows only once used.
	ThrottleWait *prometheus.HistogramVec
	// ThrottledRuns counts the runs whose setup log says they were made
	// to wait, by cause: client (the client's rate limiter held their
	// requests more than a second in total) or apf (the API server
	// answered 429 Too Many Requests to one of them: API Priority and
	// Fairness, or its max-in-flight limit).
	ThrottledRuns *prometheus.CounterVec
}

// KubeClient holds the process's kube API client metrics: process-wide,
// as client-go's own are (every kube executor of the process adds to
// them), and registered by NewRegistry; all vectors, so a process that
// makes no API request exports no series of them.
var KubeClient = newKubeClient()

func newKubeClient() *KubeClientMetrics {
	ns, sub := Namespace, "runner"
	return &KubeClientMetrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "kube_api_requests_total",
			Help: "Kubernetes API requests the kube executor sent (each try), by verb, resource and HTTP status code (error: no answer)."},
			[]string{"verb", "resource", "code"}),
		ThrottleWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "kube_client_throttle_seconds",
			Help:    "Time each Kubernetes API request waited for the kube executor's client-side rate limiter (--kube-api-qps, --kube-api-burst) before it was sent.",
			Buckets: LatencyBuckets}, nil),
		ThrottledRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "kube_throttled_runs_total",
			Help: "Runs whose setup log says they were made to wait, by cause: client (the client-side rate limiter, over 1 s in total) or apf (429 Too Many Requests from the API server)."},
			[]string{"cause"}),
	}
}

// Collectors returns m's collectors, for a registry.
func (m *KubeClientMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Requests, m.ThrottleWait, m.ThrottledRuns}
}
