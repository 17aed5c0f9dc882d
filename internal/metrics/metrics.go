package metrics

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/version"
)

// Namespace prefixes every metric name: knotless_...
const Namespace = "knotless"

// NewRegistry returns a registry holding the Go runtime's and this
// process's collectors, knotless_build_info{version} (always 1) and the
// process-wide KubeClient metrics (no series until a kube executor
// sends a request).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(KubeClient.Collectors()...)
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1; its version label is the program's version.", ConstLabels: prometheus.Labels{"version": version.Version}})
	info.Set(1)
	reg.MustRegister(info)
	return reg
}

// Handler serves reg in the Prometheus exposition format (text, or
// OpenMetrics when asked for).
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
}

// Reason is a run's or step's reason as a label value: one of the api
// Reason constants, "" for none, or "other".
func Reason(reason string) string {
	if reason == "" || api.IsReason(reason) {
		return reason
	}
	return "other"
}

// State is a run state as a label value: a known state, or "other".
func State(state string) string {
	if slices.Contains(api.RunStates, state) {
		return state
	}
	return "other"
}

// StepState is a step state as a label value: a known state, or "other".
func StepState(state string) string {
	if state == api.StepPending || state == api.StepRunning || api.StepIsFinal(state) {
		return state
	}
	return "other"
}

// Code is an HTTP status code as a label value ("404").
func Code(status int) string { return strconv.Itoa(status) }

// DurationBuckets are histogram buckets in seconds for waits and steps:
// 50 ms to about 3 hours.
var DurationBuckets = prometheus.ExponentialBucketsRange(0.05, 10800, 16)

// LatencyBuckets are histogram buckets in seconds for requests: 1 ms to
// about 10 s.
var LatencyBuckets = prometheus.ExponentialBucketsRange(0.001, 10, 14)
