package runner

import (
	"github.com/prometheus/client_golang/prometheus"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/metrics"
)

// Metrics are knotless-run's Prometheus metrics (knotless_runner_*),
// served by `knotless-run run --metrics-listen`. It is also the
// executor.Observer of the runner's executor. Safe for concurrent use.
type Metrics struct {
	Registry     *prometheus.Registry
	runs         *prometheus.CounterVec   // state, reason
	stepDuration *prometheus.HistogramVec // state
	logBytes     prometheus.Counter
	envMade      *prometheus.CounterVec // executor
	envRemoved   *prometheus.CounterVec // executor
	reconnects   *prometheus.CounterVec // executor
	claims       *prometheus.CounterVec // result: run, none, error
}

var _ executor.Observer = (*Metrics)(nil)

// NewMetrics returns the runner's metrics in a registry of their own.
func NewMetrics() *Metrics {
	ns, sub := metrics.Namespace, "runner"
	m := &Metrics{
		Registry: metrics.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "runs_finished_total",
			Help: "Runs this runner executed to an end, by final state and reason."}, []string{"state", "reason"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "step_duration_seconds",
			Help: "Time steps ran on this runner, by final step state.", Buckets: metrics.DurationBuckets}, []string{"state"}),
		logBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "log_bytes_total",
			Help: "Bytes of step logs this runner recorded (masked and capped), before shipping."}),
		envMade: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "environments_created_total",
			Help: "Job environments made (kube: job pods created; docker: containers; shell: process trees), by executor."}, []string{"executor"}),
		envRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "environments_deleted_total",
			Help: "Job environments removed (kube: job pods deleted), after their run or swept, by executor."}, []string{"executor"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "agent_reconnects_total",
			Help: "Dropped connections to a step agent dialed again successfully, by executor."}, []string{"executor"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "claims_total",
			Help: "Claims (long polls) this runner made, by result: run (it claimed one run or several), none (the wait ran out) or error."}, []string{"result"}),
	}
	m.Registry.MustRegister(m.runs, m.stepDuration, m.logBytes, m.envMade, m.envRemoved, m.reconnects, m.claims)
	return m
}

// CountEnvironments adds knotless_runner_job_pods{phase}, read from c at
// each scrape (the kube executor's job pods by status.phase, "Warm" for
// unclaimed warm pods).
func (m *Metrics) CountEnvironments(c executor.EnvironmentCounter) {
	m.Registry.MustRegister(envCollector{c})
}

var jobPodsDesc = prometheus.NewDesc(metrics.Namespace+"_runner_job_pods",
	"Job pods of this runner by phase (Pending, Running, Succeeded, Failed, Unknown; Warm for unclaimed warm pods), from its watch.",
	[]string{"phase"}, nil)

// envCollector collects knotless_runner_job_pods.
type envCollector struct{ c executor.EnvironmentCounter }

func (e envCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jobPodsDesc }

func (e envCollector) Collect(ch chan<- prometheus.Metric) {
	counts := e.c.EnvironmentsByPhase()
	for _, phase := range []string{"Pending", "Running", "Succeeded", "Failed", "Unknown", "Warm"} {
		ch <- prometheus.MustNewConstMetric(jobPodsDesc, prometheus.GaugeValue, float64(counts[phase]), phase)
	}
}

// EnvironmentMade implements executor.Observer.
func (m *Metrics) EnvironmentMade(ex string) { m.envMade.WithLabelValues(ex).Inc() }

// EnvironmentRemoved implements executor.Observer.
func (m *Metrics) EnvironmentRemoved(ex string) { m.envRemoved.WithLabelValues(ex).Inc() }

// AgentReconnected implements executor.Observer.
func (m *Metrics) AgentReconnected(ex string) { m.reconnects.WithLabelValues(ex).Inc() }

// claimed counts one claim's result: got is whether it claimed any run
// (one or several), err its error.
func (m *Metrics) claimed(got bool, err error) {
	if m == nil {
		return
	}
	switch {
	case got:
		m.claims.WithLabelValues("run").Inc()
	case err != nil:
		m.claims.WithLabelValues("error").Inc()
	default:
		m.claims.WithLabelValues("none").Inc()
	}
}

// observedReporter is a SpoolReporter that also counts what it records.
type observedReporter struct {
	SpoolReporter
	m *Metrics
}

func (r observedReporter) Log(step int) (logship.LogFile, error) {
	w, err := r.SpoolReporter.Log(step)
	if err != nil {
		return w, err
	}
	return countingLog{w, r.m.logBytes}, nil
}

func (r observedReporter) Step(u StepUpdate) error {
	if u.Duration > 0 {
		r.m.stepDuration.WithLabelValues(metrics.StepState(u.State)).Observe(u.Duration.Seconds())
	}
	return r.SpoolReporter.Step(u)
}

func (r observedReporter) Done(res Result) error {
	r.m.runs.WithLabelValues(metrics.State(res.State), metrics.Reason(res.Reason)).Inc()
	return r.SpoolReporter.Done(res)
}

type countingLog struct {
	logship.LogFile
	n prometheus.Counter
}

func (c countingLog) Write(p []byte) (int, error) {
	n, err := c.LogFile.Write(p)
	c.n.Add(float64(n))
	return n, err
}

// Describe sends the descriptions of every runner metric (their names
// whether or not anything was counted yet), as a prometheus.Collector's
// Describe does.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range []prometheus.Collector{m.runs, m.stepDuration, m.logBytes, m.envMade, m.envRemoved, m.reconnects, m.claims} {
		c.Describe(ch)
	}
}
