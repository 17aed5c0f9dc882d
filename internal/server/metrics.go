package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"knotless.dev/knotless/internal/metrics"
	"knotless.dev/knotless/internal/store"
)

// OnlineWindow is how recently a runner must have been heard from to
// count as online in knotless_runners_online: a runner long-polls (at most
// 60 s a claim) and heartbeats every few seconds while it runs.
const OnlineWindow = 2 * time.Minute

// serverMetrics are knotless-server's Prometheus metrics. Counters and
// histograms count what this replica did; the gauges read from the
// database at scrape time (dbCollector) describe the whole system, the
// same on every replica.
type serverMetrics struct {
	reg           *prometheus.Registry
	runsFinished  *prometheus.CounterVec   // state, reason
	queueWait     prometheus.Histogram     // created → claimed
	claimLatency  prometheus.Histogram     // a claim's look → run handed over
	stepDuration  *prometheus.HistogramVec // state
	logBytes      prometheus.Counter
	leasesExpired prometheus.Counter
	apiErrors     *prometheus.CounterVec // code
	sweeperLeader prometheus.Gauge
}

func newServerMetrics(s *Server) *serverMetrics {
	ns := metrics.Namespace
	m := &serverMetrics{
		reg: metrics.NewRegistry(),
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "runs_finished_total",
			Help: "Runs this replica saw end, by final state and reason (reason \"\" for succeeded; \"other\" for a reason the runner made up)."},
			[]string{"state", "reason"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "run_queue_wait_seconds",
			Help: "Time from a run's creation to its claim, for the runs this replica handed to a runner.", Buckets: metrics.DurationBuckets}),
		claimLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "claim_latency_seconds",
			Help:    "Time a successful claim took from the look at the queue to its runs handed over (one, or several for a claim with max; database and secrets; not the long poll's wait).",
			Buckets: metrics.LatencyBuckets}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "step_duration_seconds",
			Help: "Time steps ran, as their runners measured it, by final step state.", Buckets: metrics.DurationBuckets}, []string{"state"}),
		logBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "log_bytes_total",
			Help: "Bytes of step logs stored through this replica."}),
		leasesExpired: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "leases_expired_total",
			Help: "Runs ended because their runner stopped renewing the lease (errored/runner-lost, or cancelled), by this replica's sweeper."}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "api_errors_total",
			Help: "XRPC requests answered with an error, by HTTP status code."}, []string{"code"}),
		sweeperLeader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "sweeper_leader",
			Help: "1 while this replica runs the lease sweeper (one replica at a time), else 0."}),
	}
	m.reg.MustRegister(m.runsFinished, m.queueWait, m.claimLatency, m.stepDuration, m.logBytes, m.leasesExpired,
		m.apiErrors, m.sweeperLeader, &dbCollector{s: s})
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "claims_waiting",
		Help: "Claims (runners' long polls) waiting for work on this replica."},
		func() float64 { return float64(s.ClaimStats().Waiting) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "log_followers_waiting",
		Help: "Log followers (long polls for a step's next bytes) waiting on this replica."},
		func() float64 { return float64(s.LogFollowers()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "object_moves_total",
		Help: "Ended runs whose logs and outputs this replica moved to the object store (--object-store)."},
		func() float64 { n, _ := s.ObjectMoves(); return float64(n) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "object_move_failures_total",
		Help: "Moves to the object store that failed and were left for a later pass (the store down, slow, full or refusing)."},
		func() float64 { _, n := s.ObjectMoves(); return float64(n) }))
	return m
}

// LogFollowers returns how many log followers (getLog long polls) wait
// for bytes on this replica now.
func (s *Server) LogFollowers() int { return int(s.followers.Load()) }

// runFinished counts a run that ended.
func (m *serverMetrics) runFinished(r store.Run) {
	m.runsFinished.WithLabelValues(metrics.State(r.State), metrics.Reason(r.Reason)).Inc()
}

// stepEnded observes a step that ended after running.
func (m *serverMetrics) stepEnded(st store.Step) {
	if st.StartedAt != nil && st.FinishedAt != nil {
		m.stepDuration.WithLabelValues(metrics.StepState(st.State)).Observe(st.FinishedAt.Sub(*st.StartedAt).Seconds())
	}
}

// dbCollector reads the system's figures from the database at each
// scrape: one Counts call, bounded by a timeout.
type dbCollector struct{ s *Server }

var (
	runsDesc = prometheus.NewDesc("knotless_runs", "Runs in the database by state and reason (reason \"\" while not final).",
		[]string{"state", "reason"}, nil)
	oldestQueuedDesc = prometheus.NewDesc("knotless_oldest_queued_run_age_seconds",
		"Age of the oldest queued run; 0 when none is queued.", nil, nil)
	runnersOnlineDesc = prometheus.NewDesc("knotless_runners_online",
		"Approved runners heard from within the last 2 minutes.", nil, nil)
	runnersApprovedDesc = prometheus.NewDesc("knotless_runners_approved", "Approved runners.", nil, nil)
	dbUpDesc            = prometheus.NewDesc("knotless_database_up",
		"1 when the last scrape read the database, else 0.", nil, nil)
)

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{runsDesc, oldestQueuedDesc, runnersOnlineDesc, runnersApprovedDesc, dbUpDesc} {
		ch <- d
	}
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := time.Now()
	counts, err := c.s.store.Counts(ctx, now.Add(-OnlineWindow))
	if err != nil {
		c.s.log.Warn("metrics: read counts from the database", "err", err)
		ch <- prometheus.MustNewConstMetric(dbUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(dbUpDesc, prometheus.GaugeValue, 1)
	byLabel := map[[2]string]int64{}
	for _, rc := range counts.Runs {
		byLabel[[2]string{metrics.State(rc.State), metrics.Reason(rc.Reason)}] += rc.N
	}
	for l, n := range byLabel {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(n), l[0], l[1])
	}
	age := 0.0
	if counts.OldestQueued != nil {
		age = max(now.Sub(*counts.OldestQueued).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(oldestQueuedDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(runnersOnlineDesc, prometheus.GaugeValue, float64(counts.RunnersOnline))
	ch <- prometheus.MustNewConstMetric(runnersApprovedDesc, prometheus.GaugeValue, float64(counts.RunnersApproved))
}

// Health endpoints, for a load balancer and Kubernetes probes.
const (
	HealthzPath = "/healthz" // alive: the process serves HTTP
	ReadyzPath  = "/readyz"  // ready: the database answers and is migrated
	MetricsPath = "/metrics" // Prometheus metrics
)

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// readyz answers 200 when the database answers and its migrations are
// applied, 503 (with the reason) otherwise, and 503 once the server is
// shutting down, so that a load balancer stops sending it requests.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	select {
	case <-s.closing:
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("shutting down\n"))
		return
	default:
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("database not ready: " + err.Error() + "\n"))
		return
	}
	w.Write([]byte("ok\n"))
}

// observeStep records the duration of step index of run, which just
// ended, from its stored start and end.
func (s *Server) observeStep(ctx context.Context, run int64, index int) {
	steps, err := s.store.Steps(ctx, run)
	if err != nil {
		return // a metric is not worth failing the runner's report for
	}
	for _, st := range steps {
		if st.Index == index {
			s.metrics.stepEnded(st)
		}
	}
}
