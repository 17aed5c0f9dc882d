package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store/postgres/pgtest"
)

// idleReplicas is -idle-replicas: 0 measures one server on SQLite (the
// default); N ≥ 1 measures N replicas on PostgreSQL.
var idleReplicas = flag.Int("idle-replicas", 0,
	"idle benchmark: 0 measures one server on SQLite; N ≥ 1 starts PostgreSQL (Debian's server binaries, as make demo-scale does) "+
		"and N server replicas on it sharing one data directory, runner i dialling replica i mod N (as a load balancer spreading "+
		"connections round-robin), the pushes made to the first")

// ReplicaFigures are one replica's figures in the idle benchmark on
// PostgreSQL. Sizes are bytes; CPU is percent of one core.
type ReplicaFigures struct {
	Replica       int     `json:"replica"`
	URL           string  `json:"url"`
	Runners       int     `json:"runners"` // runners dialling it
	BaselineRSS   int64   `json:"baselineRssBytes"`
	BaselineCPU   float64 `json:"baselineCpuPercent"`
	RegisteredRSS int64   `json:"registeredRssBytes"`
	PeakRSS       int64   `json:"peakRssBytes"` // highest VmRSS sampled (each second) in the window
	EndRSS        int64   `json:"endRssBytes"`
	HWM           int64   `json:"hwmBytes"`
	CPU           float64 `json:"cpuPercent"` // mean over the window
	CPUMaxSecond  float64 `json:"cpuMaxSecondPercent"`
	// CPUPerSecond is its CPU in each second of the window.
	CPUPerSecond []float64 `json:"cpuPercentPerSecond"`
	Files        int       `json:"openFiles"` // at the window's end
	// ClientConns is the established TCP connections on its listening
	// port at the window's end: the runners', the benchmark's own.
	ClientConns int `json:"clientConnections"`
	// DBConns and DBConnsMax are its connections to PostgreSQL (its pool,
	// its LISTEN connection and the advisory locks it holds, as
	// pg_stat_activity counts them by application_name) at the window's
	// end and at most, sampled each second in the window; DBConnsStartMax
	// at most while the polls started (sampled every 250 ms).
	DBConns         int     `json:"databaseConnections"`
	DBConnsMax      int     `json:"databaseConnectionsMax"`
	DBConnsStartMax int     `json:"databaseConnectionsStartMax"`
	Waiting         float64 `json:"claimsWaiting"` // its knotless_claims_waiting at the window's end
}

// PostgresFigures are PostgreSQL's in the idle benchmark: all its
// processes (the postmaster and its children).
type PostgresFigures struct {
	Version        string `json:"version"`
	MaxConnections int    `json:"maxConnections"`
	Processes      int    `json:"processes"` // at the window's end
	// PeakPSS and EndPSS sum the processes' proportional set size
	// (/proc/PID/smaps_rollup Pss: shared memory counted once).
	PeakPSS      int64     `json:"peakPssBytes"`
	EndPSS       int64     `json:"endPssBytes"`
	CPU          float64   `json:"cpuPercent"` // mean over the window, of all its processes
	CPUMaxSecond float64   `json:"cpuMaxSecondPercent"`
	CPUPerSecond []float64 `json:"cpuPercentPerSecond"`
	// Connections, ConnectionsMax and ConnectionsStartMax count client
	// backends in pg_stat_activity (the benchmark's own not counted): at
	// the window's end, at most in it, and at most while the polls
	// started; Active those of Connections running a statement.
	Connections         int `json:"connections"`
	ConnectionsMax      int `json:"connectionsMax"`
	ConnectionsStartMax int `json:"connectionsStartMax"`
	Active              int `json:"active"`
}

// farWorkflow is idleWorkflow for the runners of replica 1 only (label
// replica-1): pushed to replica 0, its run is claimed through replica 1,
// woken by PostgreSQL's NOTIFY.
var farWorkflow = strings.Replace(idleWorkflow, "runners: [idle]", "runners: [idle, replica-1]", 1)

// replicaCluster is a cluster of replicas on PostgreSQL: cluster.server
// and cluster.url are the first replica's.
type replicaCluster struct {
	*cluster
	pg       *pgtest.Server
	replicas []*proc
	urls     []string
	apps     []string   // each replica's application_name in PostgreSQL
	views    []*cluster // the cluster as seen through each replica (url, admin)
}

// startReplicas starts PostgreSQL (pgtest), a database on it and n
// knotless-server replicas on it sharing one data directory, each
// listening on a loopback port of its own, then makes the repository
// admin/bench and the checkout holding workflow (startCluster's).
func startReplicas(ctx context.Context, bin, workflow string, n int) (rc *replicaCluster, err error) {
	pgBin, err := pgtest.Bin()
	if err != nil {
		return nil, fmt.Errorf("-idle-replicas needs PostgreSQL: %w", err)
	}
	c, err := newCluster(bin)
	if err != nil {
		return nil, err
	}
	rc = &replicaCluster{cluster: c}
	defer func() {
		if err != nil {
			rc.Close()
			rc = nil
		}
	}()
	progress("idle: starting PostgreSQL (%s) and %d replicas on it", pgBin, n)
	if rc.pg, err = pgtest.StartServer(ctx, pgBin); err != nil {
		return rc, err
	}
	dbURL, err := rc.pg.NewDatabase(ctx)
	if err != nil {
		return rc, err
	}
	data := filepath.Join(c.dir, "server")
	for i := range n {
		port, err := pgtest.FreePort()
		if err != nil {
			return rc, err
		}
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		app := fmt.Sprintf("knotless-replica-%d", i)
		// application_name tells the replicas' connections apart in
		// pg_stat_activity.
		p, err := c.start("knotless-server", "--data", data, "--database", dbURL+"&application_name="+app,
			"--listen", listen, "--lease", "30s", "--log-level", "warn",
			"--max-registrations-per-minute", "1000000") // the benchmarks register many runners from one address
		if err != nil {
			return rc, err
		}
		u := "http://" + listen
		if i == 0 {
			c.server, c.url = p, u
		}
		rc.replicas, rc.urls, rc.apps = append(rc.replicas, p), append(rc.urls, u), append(rc.apps, app)
		if err := waitReady(ctx, p, u); err != nil {
			return rc, err
		}
	}
	if err := c.waitFile(ctx, filepath.Join(data, "admin.token"), &c.token); err != nil {
		return rc, err
	}
	if err := c.setUp(ctx, workflow); err != nil {
		return rc, err
	}
	for _, u := range rc.urls {
		v := *c
		v.url, v.admin = u, &api.Client{BaseURL: u, Auth: api.BearerToken(c.token)}
		rc.views = append(rc.views, &v)
	}
	return rc, nil
}

// waitReady waits until the server p at u answers /readyz with 200, at
// most a minute.
func waitReady(ctx context.Context, p *proc, u string) error {
	return pollEvery(ctx, 50*time.Millisecond, time.Minute, u+"/readyz", func() (bool, error) {
		select {
		case <-p.done:
			return true, fmt.Errorf("knotless-server exited; its log: %s", p.log)
		default:
		}
		resp, err := http.Get(u + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// Close stops the replicas (cluster.Close), then PostgreSQL.
func (rc *replicaCluster) Close() {
	rc.cluster.Close()
	if rc.pg != nil {
		if err := rc.pg.Stop(); err != nil {
			progress("idle: stop PostgreSQL: %v", err)
		}
	}
}

// benchIdleReplicas is benchIdle with replicas on PostgreSQL: runner i
// registers with and dials replica i mod replicas (its own connection, as
// behind a load balancer that spreads connections round-robin and keeps
// each on its replica), and the runs are pushed to replica 0, so that a
// claim answered by another replica was woken through PostgreSQL
// (LISTEN/NOTIFY). The top-level RSS and CPU figures of the result sum
// the replicas'; Replicas and Postgres hold each one's. Long because it
// is the benchmark's steps in order (PostgreSQL, the replicas, the
// registrations, the polls, the window, the pushes), each reading the
// last one's state, as benchIdle's are.
func benchIdleReplicas(ctx context.Context, bin string, n, replicas int, window time.Duration) (*IdleResult, error) {
	per := (n + replicas - 1) / replicas
	maxConns, restore := fitMaxConns(per)
	rc, err := startReplicas(ctx, bin, idleWorkflow, replicas)
	restore()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	mon, err := newReplicaMonitor(ctx, rc)
	if err != nil {
		return nil, err
	}
	defer mon.close()
	res := &IdleResult{Runners: n, Wait: claimWait, WindowS: window.Seconds(), MaxConns: maxConns,
		Replicas: make([]ReplicaFigures, replicas), Postgres: &PostgresFigures{}}
	for i := range res.Replicas {
		res.Replicas[i] = ReplicaFigures{Replica: i, URL: rc.urls[i], Runners: n / replicas}
		if i < n%replicas {
			res.Replicas[i].Runners++
		}
	}
	if err := mon.pgInfo(ctx, res.Postgres); err != nil {
		return nil, err
	}

	base := min(window, 10*time.Second)
	progress("idle: %d replicas and PostgreSQL alone for %s", replicas, base)
	res.BaselineWindowS = base.Seconds()
	s, err := mon.measure(ctx, base)
	if err != nil {
		return nil, err
	}
	for i := range res.Replicas {
		r := &res.Replicas[i]
		r.BaselineRSS, r.BaselineCPU = s.endRSS[i], s.cpu[i]
		res.BaselineRSS += r.BaselineRSS
		res.BaselineCPU += r.BaselineCPU
	}

	ips := idleAddresses(n)
	res.Addresses = max(1, len(ips))
	progress("idle: registering and approving %d runners from %d client address(es), runner i with replica i mod %d", n, res.Addresses, replicas)
	transports := idleTransports(ips, n)
	defer func() {
		for _, t := range transports {
			t.CloseIdleConnections()
		}
	}()
	var desc api.DescribeServerOutput
	if err := rc.admin.Query(ctx, api.MethodDescribeServer, nil, &desc); err != nil {
		return nil, fmt.Errorf("describe server: %w", err)
	}
	t0 := time.Now()
	clients, err := registerRunnersOn(ctx, rc.views, desc.DID, transports, n)
	if err != nil {
		return nil, err
	}
	res.RegisterS = time.Since(t0).Seconds()
	res.RegisterRetries = registerRetries.Swap(0)
	if res.RegisterRetries > 0 {
		progress("idle: %d calls of registering failed with a 5xx answer and were made again", res.RegisterRetries)
	}
	for i, p := range rc.replicas {
		if st, err := procStatus(p.cmd.Process.Pid); err == nil {
			res.Replicas[i].RegisteredRSS = st["VmRSS"]
			res.RegisteredRSS += st["VmRSS"]
		}
	}

	pollCtx, stopPolls := context.WithCancel(ctx)
	p := &idlePollers{claims: make(chan claimSeen, 16), replicas: replicas}
	defer func() {
		stopPolls()
		p.wg.Wait()
	}()
	stopConns := mon.sampleConnections(ctx, 250*time.Millisecond)
	t0 = time.Now()
	p.start(pollCtx, clients)
	err = waitAllWaitingOn(ctx, rc.cluster, rc.urls, n, p)
	byApp, total := stopConns()
	if err != nil {
		return nil, err
	}
	res.AllPollingS = time.Since(t0).Seconds()
	p.startFigures(res)
	res.Postgres.ConnectionsStartMax = total
	for i, app := range rc.apps {
		res.Replicas[i].DBConnsStartMax = byApp[app]
	}
	time.Sleep(500 * time.Millisecond) // the last polls finish checking for work and start waiting

	progress("idle: %d runners long-polling %d replicas; measuring for %s", n, replicas, window)
	p.reset()
	client0 := selfCPU()
	s, err = mon.measure(ctx, window)
	if err != nil {
		return nil, err
	}
	res.ClientCPU = percent(selfCPU()-client0, window)
	p.windowFigures(res)
	mon.fill(ctx, res, s)
	if res.LastError != "" {
		progress("idle: last poll error: %s", res.LastError)
	}

	pushes := idlePushes
	if window < 10*time.Second {
		pushes = 3
	}
	far := farWorkflow
	if replicas == 1 {
		far = "" // no replica 1
	}
	if err := pushWhileWaitingFar(ctx, rc.cluster, p, res, pushes, far); err != nil {
		return nil, err
	}
	printIdlePushes(os.Stderr, res)
	return res, nil
}

// replicaMonitor samples the replicas' processes and PostgreSQL's.
type replicaMonitor struct {
	rc         *replicaCluster
	conn       *pgx.Conn // to PostgreSQL, for pg_stat_activity
	postmaster int
}

func newReplicaMonitor(ctx context.Context, rc *replicaCluster) (*replicaMonitor, error) {
	b, err := os.ReadFile(filepath.Join(rc.pg.Dir, "data", "postmaster.pid"))
	if err != nil {
		return nil, fmt.Errorf("find PostgreSQL's process: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return nil, fmt.Errorf("find PostgreSQL's process: postmaster.pid: %w", err)
	}
	conn, err := pgx.Connect(ctx, rc.pg.URL("postgres"))
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return &replicaMonitor{rc: rc, conn: conn, postmaster: pm}, nil
}

func (m *replicaMonitor) close() { m.conn.Close(context.Background()) }

// pgInfo stores PostgreSQL's version and max_connections in f.
func (m *replicaMonitor) pgInfo(ctx context.Context, f *PostgresFigures) error {
	var mc string
	if err := m.conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('max_connections')`).Scan(&f.Version, &mc); err != nil {
		return fmt.Errorf("ask PostgreSQL its version: %w", err)
	}
	f.MaxConnections, _ = strconv.Atoi(mc)
	return nil
}

// connections counts PostgreSQL's client backends by application_name
// (this monitor's own not counted), their total, and those active.
func (m *replicaMonitor) connections(ctx context.Context) (byApp map[string]int, total, active int, err error) {
	rows, err := m.conn.Query(ctx, `SELECT application_name, count(*), count(*) FILTER (WHERE state = 'active')
		FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1`)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read pg_stat_activity: %w", err)
	}
	defer rows.Close()
	byApp = map[string]int{}
	for rows.Next() {
		var app string
		var n, a int
		if err := rows.Scan(&app, &n, &a); err != nil {
			return nil, 0, 0, fmt.Errorf("read pg_stat_activity: %w", err)
		}
		byApp[app] += n
		total += n
		active += a
	}
	return byApp, total, active, rows.Err()
}

// sampleConnections samples connections every interval until the
// function it returns is called, which returns the highest count of each
// application_name and the highest total.
func (m *replicaMonitor) sampleConnections(ctx context.Context, interval time.Duration) func() (map[string]int, int) {
	ctx, cancel := context.WithCancel(ctx)
	maxApp, maxTotal := map[string]int{}, 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if byApp, total, _, err := m.connections(ctx); err == nil {
				for k, v := range byApp {
					maxApp[k] = max(maxApp[k], v)
				}
				maxTotal = max(maxTotal, total)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() (map[string]int, int) {
		cancel()
		wg.Wait()
		return maxApp, maxTotal
	}
}

// samples are what measure saw: per replica (by index) and of PostgreSQL.
type samples struct {
	d                    time.Duration
	cpu                  []float64   // mean % of one core
	perSecond            [][]float64 // % of one core in each second
	peakRSS, endRSS      []int64
	maxConns             map[string]int
	pgCPU                float64
	pgPerSecond          []float64
	pgPeakPSS, pgEndPSS  int64
	pgMaxConns, pgProcs  int
	pgConnsEnd, pgActive int
	pgConnsByAppEnd      map[string]int
}

// measure samples every second for d: each replica's CPU and VmRSS,
// PostgreSQL's processes' CPU and summed PSS, and its connections.
func (m *replicaMonitor) measure(ctx context.Context, d time.Duration) (*samples, error) {
	pids := make([]int, len(m.rc.replicas))
	for i, p := range m.rc.replicas {
		pids[i] = p.cmd.Process.Pid
	}
	s := &samples{d: d, cpu: make([]float64, len(pids)), perSecond: make([][]float64, len(pids)),
		peakRSS: make([]int64, len(pids)), endRSS: make([]int64, len(pids)), maxConns: map[string]int{}}
	cpu0 := make([]time.Duration, len(pids))
	for i, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return nil, err
		}
		cpu0[i] = c
	}
	pg0, _ := groupCPU(m.postmaster)
	start := time.Now()
	secCPU, secPG, secAt := slices.Clone(cpu0), pg0, start
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		for i, pid := range pids {
			c, err := procCPU(pid)
			if err != nil {
				return nil, err
			}
			s.perSecond[i] = append(s.perSecond[i], percent(c-secCPU[i], now.Sub(secAt)))
			secCPU[i] = c
			if st, err := procStatus(pid); err == nil {
				s.endRSS[i] = st["VmRSS"]
				s.peakRSS[i] = max(s.peakRSS[i], s.endRSS[i])
			}
		}
		if c, procs := groupCPU(m.postmaster); procs > 0 {
			s.pgPerSecond = append(s.pgPerSecond, percent(c-secPG, now.Sub(secAt)))
			secPG = c
		}
		s.pgEndPSS, s.pgProcs = groupPSS(m.postmaster)
		s.pgPeakPSS = max(s.pgPeakPSS, s.pgEndPSS)
		if byApp, total, active, err := m.connections(ctx); err == nil {
			for k, v := range byApp {
				s.maxConns[k] = max(s.maxConns[k], v)
			}
			s.pgMaxConns = max(s.pgMaxConns, total)
			s.pgConnsEnd, s.pgActive, s.pgConnsByAppEnd = total, active, byApp
		}
		secAt = now
		if now.Sub(start) >= d-100*time.Millisecond {
			break
		}
	}
	el := time.Since(start)
	for i := range pids {
		s.cpu[i] = percent(secCPU[i]-cpu0[i], el)
	}
	s.pgCPU = percent(secPG-pg0, el)
	s.pgPerSecond = slices.Clip(s.pgPerSecond)
	return s, nil
}

// fill stores the window's samples s in res, with what is read once at
// its end (open files, client connections, the claims waiting).
func (m *replicaMonitor) fill(ctx context.Context, res *IdleResult, s *samples) {
	ports := make([]int, len(m.rc.urls))
	for i, u := range m.rc.urls {
		ports[i], _ = strconv.Atoi(u[strings.LastIndexByte(u, ':')+1:])
	}
	conns := establishedOn(ports)
	res.CPU, res.PeakRSS, res.EndRSS = 0, 0, 0
	for i := range res.Replicas {
		r := &res.Replicas[i]
		pid := m.rc.replicas[i].cmd.Process.Pid
		r.CPU, r.CPUPerSecond, r.PeakRSS, r.EndRSS = s.cpu[i], s.perSecond[i], s.peakRSS[i], s.endRSS[i]
		r.CPUMaxSecond = slices.Max(append([]float64{0}, s.perSecond[i]...))
		r.DBConns, r.DBConnsMax = s.pgConnsByAppEnd[m.rc.apps[i]], s.maxConns[m.rc.apps[i]]
		r.Files, _, _ = openFiles(pid, "")
		r.ClientConns = conns[ports[i]]
		if st, err := procStatus(pid); err == nil {
			r.HWM = st["VmHWM"]
			res.HWM += r.HWM
			res.Threads += st["Threads"]
		}
		r.Waiting, _ = scrapeMetric(ctx, m.rc.urls[i], "knotless_claims_waiting")
		res.CPU += r.CPU
		res.PeakRSS += r.PeakRSS
		res.EndRSS += r.EndRSS
		res.Files += r.Files
		res.DBConns += r.DBConns
	}
	res.CPUPerSecond = nil
	for sec := range s.perSecond[0] {
		sum := 0.0
		for i := range s.perSecond {
			if sec < len(s.perSecond[i]) {
				sum += s.perSecond[i][sec]
			}
		}
		res.CPUPerSecond = append(res.CPUPerSecond, sum)
	}
	pg := res.Postgres
	pg.Processes, pg.PeakPSS, pg.EndPSS = s.pgProcs, s.pgPeakPSS, s.pgEndPSS
	pg.CPU, pg.CPUPerSecond = s.pgCPU, s.pgPerSecond
	pg.CPUMaxSecond = slices.Max(append([]float64{0}, s.pgPerSecond...))
	pg.Connections, pg.ConnectionsMax, pg.Active = s.pgConnsEnd, s.pgMaxConns, s.pgActive
}

// printIdleReplicas writes the idle benchmark's figures of each replica
// and of PostgreSQL (d.Replicas, d.Postgres) as a table; nothing without
// them.
func printIdleReplicas(w io.Writer, d *IdleResult) {
	if d == nil || len(d.Replicas) == 0 || d.Postgres == nil {
		return
	}
	pg := d.Postgres
	fmt.Fprintf(w, "\n   %d replicas on PostgreSQL %s (max_connections %d), %d runners spread over them (runner i on replica i mod %d), %.0f s window:\n",
		len(d.Replicas), pg.Version, pg.MaxConnections, d.Runners, len(d.Replicas), d.WindowS)
	fmt.Fprintf(w, "   %-14s %8s %10s %10s %10s %10s %8s %9s %8s %14s\n",
		"", "runners", "RSS alone", "RSS peak", "CPU mean", "CPU max s", "files", "clients", "waiting", "DB conns (max)")
	for _, r := range d.Replicas {
		fmt.Fprintf(w, "   %-14s %8d %6.1f MiB %6.1f MiB %8.2f %% %8.1f %% %8d %9d %8.0f %8d (%d, %d at start)\n",
			fmt.Sprintf("replica %d", r.Replica), r.Runners, mib(r.BaselineRSS), mib(r.PeakRSS), r.CPU, r.CPUMaxSecond,
			r.Files, r.ClientConns, r.Waiting, r.DBConns, r.DBConnsMax, r.DBConnsStartMax)
	}
	fmt.Fprintf(w, "   %-14s %8s %10s %6.1f MiB %8.2f %% %8.1f %% %8s %9s %8s %8d (%d, %d at start)\n",
		"PostgreSQL", "", fmt.Sprintf("%d procs", pg.Processes), mib(pg.PeakPSS), pg.CPU, pg.CPUMaxSecond, "", "", "",
		pg.Connections, pg.ConnectionsMax, pg.ConnectionsStartMax)
	fmt.Fprintf(w, "   (PostgreSQL's memory is its processes' PSS summed; its connections are pg_stat_activity's client backends)\n")
	fmt.Fprintf(w, "   polls: %d answered and renewed in the window, %d errors %v; while they started: %d errors %v\n",
		d.Answered, d.Errors, d.ErrorKinds, d.StartErrors, d.StartErrorKinds)
	printIdlePushes(w, d)
}

// printIdlePushes writes push → claim of the idle benchmark on replicas.
func printIdlePushes(w io.Writer, d *IdleResult) {
	if d.PushToClaim.N == 0 {
		return
	}
	fmt.Fprintf(w, "   push to replica 0 → a waiting runner's claim answered: p50 %.0f ms, p99 %.0f ms (%d pushes, %d claims answered by another replica);\n",
		d.PushToClaim.P50, d.PushToClaim.P99, d.PushToClaim.N, d.ClaimsByOther)
	if o := d.PushToClaimOther; o.N > 0 {
		fmt.Fprintf(w, "   of them the runs only replica 1's runners qualify for (woken through NOTIFY): p50 %.0f ms, p99 %.0f ms (%d);\n", o.P50, o.P99, o.N)
	}
	fmt.Fprintf(w, "   git push alone p50 %.0f ms, p99 %.0f ms\n", d.GitPush.P50, d.GitPush.P99)
}

// groupCPU returns the CPU time used by process pid, its reaped children
// (cutime, cstime) and its live children, and how many processes that is
// (0 when pid is gone).
func groupCPU(pid int) (time.Duration, int) {
	own, ok := statCPU(pid, true)
	if !ok {
		return 0, 0
	}
	n := 1
	eachProcess(func(c int) {
		if pp, ok := parentOf(c); ok && pp == pid {
			if t, ok := statCPU(c, false); ok {
				own += t
				n++
			}
		}
	})
	return own, n
}

// statCPU reads utime + stime (and cutime + cstime if reaped) of pid.
func statCPU(pid int, reaped bool) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0, false
	}
	var ticks int64
	last := 12
	if reaped {
		last = 14
	}
	for i := 11; i <= last; i++ {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, true
}

// groupPSS sums the Pss of process pid and its children (bytes) and
// counts them.
func groupPSS(pid int) (int64, int) {
	pss := func(p int) int64 {
		f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", p))
		if err != nil {
			return 0
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				return kb * 1024
			}
		}
		return 0
	}
	total, n := pss(pid), 1
	eachProcess(func(c int) {
		if pp, ok := parentOf(c); ok && pp == pid {
			total += pss(c)
			n++
		}
	})
	return total, n
}

// establishedOn counts the established IPv4 TCP connections whose local
// port is one of ports (/proc/net/tcp), by port.
func establishedOn(ports []int) map[int]int {
	out := map[int]int{}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return out
	}
	defer f.Close()
	want := map[int]bool{}
	for _, p := range ports {
		want[p] = true
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[3] != "01" { // TCP_ESTABLISHED
			continue
		}
		_, hexPort, ok := strings.Cut(fs[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil && want[int(p)] {
			out[int(p)]++
		}
	}
	return out
}
