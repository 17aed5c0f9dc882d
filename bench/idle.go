package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/svcauth"
)

// claimWait is how long each idle runner's claim may be held, in seconds:
// what knotless-run asks for.
const claimWait = 30

// idleWorkflow is what the pushes made while the runners wait start: one
// run for any of them (label idle), which the bench's runner that claims
// it reports succeeded at once.
const idleWorkflow = `name: idle
on:
  push:
    branches: ["**"]
runners: [idle]
steps:
  - name: nothing
    run: "true"
`

// IdleResult holds the figures of the idle runners benchmark. Sizes are
// bytes; CPU is percent of one core over the window, of the server process
// (all its threads), not of this program.
type IdleResult struct {
	Runners   int     `json:"runners"`
	Wait      int     `json:"claimWaitSeconds"`
	WindowS   float64 `json:"windowSeconds"`
	Addresses int     `json:"clientAddresses"` // client addresses the runners dial from (runnersPerAddress each)
	// MaxConns is the server's --max-conns: its default, or raised to fit
	// the runners (fitMaxConns).
	MaxConns int `json:"serverMaxConns"`

	BaselineWindowS float64 `json:"baselineWindowSeconds"`
	BaselineRSS     int64   `json:"baselineRssBytes"` // no runners registered
	BaselineCPU     float64 `json:"baselineCpuPercent"`
	RegisterS       float64 `json:"registerSeconds"` // registering, approving and starting a session for all
	// RegisterRetries counts the calls of registering that failed with a
	// 5xx answer and were made again (retrying).
	RegisterRetries int64   `json:"registerRetries"`
	RegisteredRSS   int64   `json:"registeredRssBytes"` // runners registered, none polling
	AllPollingS     float64 `json:"allPollingSeconds"`  // from the first poll to every runner's claim waiting

	PeakRSS int64   `json:"peakRssBytes"` // highest VmRSS sampled in the window
	EndRSS  int64   `json:"endRssBytes"`  // VmRSS at the window's end
	HWM     int64   `json:"hwmBytes"`     // VmHWM: the process's peak RSS ever
	Threads int64   `json:"threads"`      // the server's OS threads at the end
	CPU     float64 `json:"cpuPercent"`
	// CPUPerSecond is the server's CPU in each second of the window, as
	// percent of one core.
	CPUPerSecond []float64 `json:"cpuPercentPerSecond"`
	Files        int       `json:"openFiles"` // the server's open file descriptors at the window's end
	// DBConns is the SQLite connections the server holds: its descriptors
	// open on the database file (one per connection of its pool).
	DBConns int `json:"databaseConnections"`

	// StartErrors, StartRefused and StartErrorKinds are the polls that
	// failed from the first poll to every runner waiting (the thundering
	// herd of their first polls), of them the 503/429 answers, and the
	// failures by kind ("503 ServerBusy", "connection reset", ...).
	StartErrors     int64            `json:"startPollErrors"`
	StartRefused    int64            `json:"startPollsRefused"`
	StartErrorKinds map[string]int64 `json:"startPollErrorKinds,omitempty"`
	StartLastError  string           `json:"startLastError,omitempty"`

	Answered  int64   `json:"pollsAnswered"` // claims answered "nothing" in the window
	Errors    int64   `json:"pollErrors"`
	Refused   int64   `json:"pollsRefused"`     // of Errors: 503 or 429 answers (a limit said so)
	LastError string  `json:"lastError"`        // the last poll error, if any
	ClientCPU float64 `json:"clientCpuPercent"` // this program's own, for reference

	// PushToClaim is `git push` started → the run's claim answered to a
	// waiting runner, for runs pushed one at a time while all wait.
	PushToClaim Latency `json:"pushToClaim"`
	// GitPush is the duration of `git push` itself, for comparison.
	GitPush Latency `json:"gitPush"`

	// With -idle-replicas (PostgreSQL, bench/idlepg.go): the figures of each
	// replica and of PostgreSQL, and how many of the pushes' claims another
	// replica than the one pushed to answered (woken by LISTEN/NOTIFY).
	Replicas      []ReplicaFigures `json:"replicas,omitempty"`
	Postgres      *PostgresFigures `json:"postgres,omitempty"`
	ClaimsByOther int              `json:"claimsByOtherReplica,omitempty"`
	// PushToClaimOther is push → claim of the pushes (every other one)
	// whose workflow only the runners of replica 1 qualify for, pushed to
	// replica 0: the claim is woken through PostgreSQL's NOTIFY.
	PushToClaimOther Latency          `json:"pushToClaimOtherReplica,omitzero"`
	ErrorKinds       map[string]int64 `json:"pollErrorKinds,omitempty"` // the window's poll failures by kind
}

// benchIdle registers n runners with a server process, keeps each in a
// claim long poll for the window, measures the server's memory and CPU,
// then pushes runs one at a time while they wait and times each push to
// its claim.
func benchIdle(ctx context.Context, bin string, n int, window time.Duration) (*IdleResult, error) {
	if *idleReplicas > 0 {
		return benchIdleReplicas(ctx, bin, n, *idleReplicas, window)
	}
	maxConns, restore := fitMaxConns(n)
	c, err := startCluster(ctx, bin, idleWorkflow)
	restore()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	pid := c.server.cmd.Process.Pid
	res := &IdleResult{Runners: n, Wait: claimWait, WindowS: window.Seconds(), MaxConns: maxConns}

	base := min(window, 10*time.Second)
	progress("idle: server alone for %s", base)
	res.BaselineWindowS = base.Seconds()
	cpu, _, rss, err := watch(ctx, pid, base, nil)
	if err != nil {
		return nil, err
	}
	res.BaselineCPU, res.BaselineRSS = percent(cpu, base), rss

	ips := idleAddresses(n)
	res.Addresses = max(1, len(ips))
	progress("idle: registering and approving %d runners from %d client address(es)", n, res.Addresses)
	transports := idleTransports(ips, n)
	defer func() {
		for _, t := range transports {
			t.CloseIdleConnections()
		}
	}()
	var desc api.DescribeServerOutput
	if err := c.admin.Query(ctx, api.MethodDescribeServer, nil, &desc); err != nil {
		return nil, fmt.Errorf("describe server: %w", err)
	}
	t0 := time.Now()
	clients, err := registerRunners(ctx, c, desc.DID, transports, n)
	if err != nil {
		return nil, err
	}
	res.RegisterS = time.Since(t0).Seconds()
	res.RegisterRetries = registerRetries.Swap(0)
	if st, err := procStatus(pid); err == nil {
		res.RegisteredRSS = st["VmRSS"]
	}

	pollCtx, stopPolls := context.WithCancel(ctx)
	p := &idlePollers{claims: make(chan claimSeen, 16)}
	defer func() {
		stopPolls()
		p.wg.Wait()
	}()
	t0 = time.Now()
	p.start(pollCtx, clients)
	if err := waitAllWaiting(ctx, c, n, p); err != nil {
		return nil, err
	}
	res.AllPollingS = time.Since(t0).Seconds()
	p.startFigures(res)
	// The last polls finish checking for work and start waiting.
	time.Sleep(500 * time.Millisecond)

	if err := measureIdle(ctx, c, p, res, window); err != nil {
		return nil, err
	}
	pushes := idlePushes
	if window < 10*time.Second {
		pushes = 3
	}
	if err := pushWhileWaiting(ctx, c, p, res, pushes); err != nil {
		return nil, err
	}
	progress("idle: push to claim p50 %.0f ms, p99 %.0f ms (%d pushes; git push alone p50 %.0f ms)",
		res.PushToClaim.P50, res.PushToClaim.P99, res.PushToClaim.N, res.GitPush.P50)
	return res, nil
}

// serverDefaultMaxConns is knotless-server's default --max-conns.
const serverDefaultMaxConns = 4096

// fitMaxConns makes the server the benchmark starts hold n runners'
// connections, and the benchmark's own, unless KNOTLESS_MAX_CONNS is set:
// past the default --max-conns the runners past it would be refused (503)
// and the benchmark would time out (docs/scaling.md, "One server, many
// waiting runners"). It returns the server's --max-conns and what undoes
// the setting once the server started.
func fitMaxConns(n int) (int, func()) {
	const env = "KNOTLESS_MAX_CONNS"
	if v := os.Getenv(env); v != "" {
		m, _ := strconv.Atoi(v)
		return m, func() {}
	}
	if n+64 <= serverDefaultMaxConns {
		return serverDefaultMaxConns, func() {}
	}
	m := n + n/5 + 64
	progress("idle: %d runners are past the server's default --max-conns %d: starting it with --max-conns %d (%s)", n, serverDefaultMaxConns, m, env)
	os.Setenv(env, strconv.Itoa(m))
	return m, func() { os.Unsetenv(env) }
}

// idlePushes is how many runs the idle benchmark pushes, one at a time,
// while the runners wait (3 for a window under 10 s, the smoke run's).
const idlePushes = 20

// measureIdle measures the server for window while every runner waits.
func measureIdle(ctx context.Context, c *cluster, p *idlePollers, res *IdleResult, window time.Duration) error {
	pid := c.server.cmd.Process.Pid
	progress("idle: %d runners long-polling; measuring for %s", res.Runners, window)
	p.reset()
	client0 := selfCPU()
	cpu, peak, rss, err := watch(ctx, pid, window, &res.CPUPerSecond)
	if err != nil {
		return err
	}
	res.CPU, res.PeakRSS, res.EndRSS = percent(cpu, window), peak, rss
	res.ClientCPU = percent(selfCPU()-client0, window)
	p.windowFigures(res)
	if st, err := procStatus(pid); err == nil {
		res.HWM, res.Threads = st["VmHWM"], st["Threads"]
	}
	res.Files, res.DBConns, _ = openFiles(pid, filepath.Join(c.dir, "server", "knotless.db"))
	progress("idle: server CPU %.2f%% of a core, RSS peak %.1f MiB, end %.1f MiB; %d open files, %d SQLite connections; %d polls answered, %d errors (%d refused)",
		res.CPU, mib(res.PeakRSS), mib(res.EndRSS), res.Files, res.DBConns, res.Answered, res.Errors, res.Refused)
	if res.LastError != "" {
		progress("idle: last poll error: %s", res.LastError)
	}
	return nil
}

// pushWhileWaiting pushes n commits one at a time while the runners wait
// and times each from the push's start to a runner's claim answered.
func pushWhileWaiting(ctx context.Context, c *cluster, p *idlePollers, res *IdleResult, n int) error {
	return pushWhileWaitingFar(ctx, c, p, res, n, "")
}

// pushWhileWaitingFar is pushWhileWaiting where, unless far is empty,
// every other push (the odd ones) commits the workflow far instead of
// idleWorkflow: one only another replica's runners qualify for, whose
// push → claim times also go to res.PushToClaimOther.
func pushWhileWaitingFar(ctx context.Context, c *cluster, p *idlePollers, res *IdleResult, n int, far string) error {
	var toClaim, toClaimFar, gitPush []time.Duration
	for i := range n {
		wf := ""
		if far != "" {
			wf = idleWorkflow
			if i%2 == 1 {
				wf = far
			}
		}
		if _, err := c.commitWorkflow(ctx, i, wf); err != nil {
			return err
		}
		t0 := time.Now()
		if err := c.push(ctx); err != nil {
			return err
		}
		gitPush = append(gitPush, time.Since(t0))
		select {
		case cl := <-p.claims:
			toClaim = append(toClaim, cl.at.Sub(t0))
			if far != "" && i%2 == 1 {
				toClaimFar = append(toClaimFar, cl.at.Sub(t0))
			}
			if cl.replica != 0 {
				res.ClaimsByOther++ // the push went to replica 0
			}
		case <-time.After(time.Minute):
			return fmt.Errorf("push %d: no runner claimed its run within a minute\n%s", i, c.logTails())
		case <-ctx.Done():
			return ctx.Err()
		}
		time.Sleep(settle) // the claimant reports the run and polls again
	}
	res.PushToClaim, res.GitPush = latency(toClaim), latency(gitPush)
	if far != "" {
		res.PushToClaimOther = latency(toClaimFar)
	}
	return nil
}

// claimSeen is a run a bench runner claimed, when the answer came, and
// the replica that answered (0 with one server).
type claimSeen struct {
	run     int64
	at      time.Time
	replica int
}

// idlePollers are the runners' long-poll loops and what they saw.
type idlePollers struct {
	wg                        sync.WaitGroup
	answered, failed, refused atomic.Int64
	lastErr                   atomic.Pointer[string]
	claims                    chan claimSeen
	// replicas is how many replicas the runners are spread over: runner i
	// dials replica i mod replicas (0 or 1: one server).
	replicas int

	mu    sync.Mutex
	kinds map[string]int64 // failures by errorKind since the last reset
}

// fail counts a failed poll.
func (p *idlePollers) fail(err error) {
	p.failed.Add(1)
	if isLimit(err) {
		p.refused.Add(1)
	}
	msg := err.Error()
	p.lastErr.Store(&msg)
	p.mu.Lock()
	if p.kinds == nil {
		p.kinds = map[string]int64{}
	}
	p.kinds[errorKind(err)]++
	p.mu.Unlock()
}

// reset forgets the failures and answers counted so far.
func (p *idlePollers) reset() {
	p.answered.Store(0)
	p.failed.Store(0)
	p.refused.Store(0)
	p.lastErr.Store(nil)
	p.mu.Lock()
	p.kinds = nil
	p.mu.Unlock()
}

// takeKinds returns the failures by kind counted since the last reset.
func (p *idlePollers) takeKinds() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.kinds)
}

// startFigures stores the failures of the polls' start in res.
func (p *idlePollers) startFigures(res *IdleResult) {
	res.StartErrors, res.StartRefused, res.StartErrorKinds = p.failed.Load(), p.refused.Load(), p.takeKinds()
	if e := p.lastErr.Load(); e != nil {
		res.StartLastError = *e
	}
	if res.StartErrors > 0 {
		progress("idle: while the polls started: %d poll errors (%d refused by a limit): %v; the last: %s",
			res.StartErrors, res.StartRefused, res.StartErrorKinds, res.StartLastError)
	}
}

// windowFigures stores the answers and failures of the measuring window
// in res.
func (p *idlePollers) windowFigures(res *IdleResult) {
	res.Answered, res.Errors, res.Refused = p.answered.Load(), p.failed.Load(), p.refused.Load()
	res.ErrorKinds = p.takeKinds()
	if e := p.lastErr.Load(); e != nil {
		res.LastError = *e
	}
}

// errorKind names a failed poll's kind: the answer's status and XRPC
// error name, or what the connection did.
func errorKind(err error) string {
	var e *api.Error
	switch {
	case errors.As(err, &e):
		if e.RetryAfter > 0 {
			return fmt.Sprintf("%d %s, Retry-After %s", e.Status, e.Name, e.RetryAfter)
		}
		return fmt.Sprintf("%d %s", e.Status, e.Name)
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed (EOF)"
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		return "timeout"
	}
	return "other"
}

// start runs one claim loop per client until ctx ends: a claimed run is
// reported on p.claims and completed succeeded at once; after an error
// the loop waits a second (the server's Retry-After is 5 s; knotless-run
// backs off from 200 ms doubling).
func (p *idlePollers) start(ctx context.Context, clients []*api.Client) {
	for i, cl := range clients {
		replica := i % max(1, p.replicas)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for ctx.Err() == nil {
				var out api.ClaimOutput
				err := cl.Procedure(ctx, api.MethodClaim, api.ClaimInput{Wait: claimWait}, &out)
				switch {
				case ctx.Err() != nil:
				case err != nil:
					p.fail(err)
					time.Sleep(time.Second)
				case out.Run != nil:
					select {
					case p.claims <- claimSeen{run: out.Run.Run.ID, at: time.Now(), replica: replica}:
					default:
					}
					_ = cl.Procedure(ctx, api.MethodComplete, api.CompleteInput{Run: out.Run.Run.ID,
						State: api.StateSucceeded, EnvironmentRemoved: true}, nil)
				default:
					p.answered.Add(1)
				}
			}
		}()
	}
}

// isLimit reports whether err is a server's answer that a limit was
// reached: 503 or 429.
func isLimit(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && (e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests)
}

// waitAllWaiting waits until the server holds n claims waiting (its
// knotless_claims_waiting gauge), at most a minute plus a second per 100
// runners.
func waitAllWaiting(ctx context.Context, c *cluster, n int, p *idlePollers) error {
	return waitAllWaitingOn(ctx, c, []string{c.url}, n, p)
}

// waitAllWaitingOn is waitAllWaiting over replicas at urls: the sum of
// their gauges.
func waitAllWaitingOn(ctx context.Context, c *cluster, urls []string, n int, p *idlePollers) error {
	timeout := time.Minute + time.Duration(n/100)*time.Second
	waiting := 0.0
	err := pollEvery(ctx, 250*time.Millisecond, timeout, "every runner's claim to wait", func() (bool, error) {
		sum := 0.0
		for _, u := range urls {
			v, err := scrapeMetric(ctx, u, "knotless_claims_waiting")
			if err != nil {
				return false, err
			}
			sum += v
		}
		waiting = sum
		return int(sum) >= n, nil
	})
	if err != nil {
		last := ""
		if e := p.lastErr.Load(); e != nil {
			last = "; the last poll error: " + *e
		}
		return fmt.Errorf("%w: %.0f of %d waiting, %d poll errors (%d refused by a limit)%s\n%s",
			err, waiting, n, p.failed.Load(), p.refused.Load(), last, c.logTails())
	}
	return nil
}

// registerRunners makes n runner identities, registers them for c's
// repository and approves them; it returns a client per runner, runner i
// on transports[i*len(transports)/n].
func registerRunners(ctx context.Context, c *cluster, audience string, transports []*http.Transport, n int) ([]*api.Client, error) {
	return registerRunnersOn(ctx, []*cluster{c}, audience, transports, n)
}

// registerRunnersOn is registerRunners with runner i registered with and
// dialling replicas[i mod len(replicas)] (each a view of one cluster with
// its url and admin client on that replica); with more than one replica
// it has the label replica-(i mod len(replicas)) besides idle.
func registerRunnersOn(ctx context.Context, replicas []*cluster, audience string, transports []*http.Transport, n int) ([]*api.Client, error) {
	clients := make([]*api.Client, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t := transports[i*len(transports)/n]
			labels := []string{"idle"}
			if len(replicas) > 1 {
				labels = append(labels, fmt.Sprintf("replica-%d", i%len(replicas)))
			}
			clients[i], errs[i] = registerRunner(ctx, replicas[i%len(replicas)], audience, t, fmt.Sprintf("idle-%05d", i), labels)
		}()
	}
	wg.Wait()
	return clients, errors.Join(errs...)
}

// registerAttempts bounds how often registerRunner makes a call (register,
// approve, start a session) that failed with a retryable error (a 5xx
// answer), a second apart; registerRetries counts the retries.
const registerAttempts = 5

var registerRetries atomic.Int64

// retrying calls f until it succeeds, fails with an error that is not
// api.Retryable, or registerAttempts calls failed.
func retrying(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !api.Retryable(err) || attempt == registerAttempts || ctx.Err() != nil {
			return err
		}
		registerRetries.Add(1)
		progress("idle: %v; retrying in a second", err)
		time.Sleep(time.Second)
	}
}

func registerRunner(ctx context.Context, c *cluster, audience string, transport http.RoundTripper, name string, labels []string) (*api.Client, error) {
	key, err := svcauth.GenerateKey()
	if err != nil {
		return nil, err
	}
	did, err := svcauth.DIDKey(key)
	if err != nil {
		return nil, err
	}
	signer := &svcauth.Signer{DID: did, Audience: audience, Key: key}
	cl := &api.Client{BaseURL: c.url, HTTP: &http.Client{Transport: transport}, Auth: signer.AuthFunc()}
	reg := &api.Client{BaseURL: c.url, HTTP: cl.HTTP, Auth: func(req *http.Request, nsid string) error {
		req.Header.Set(api.RegistrationTokenHeader, c.token) // the admin's API token
		return signer.AuthFunc()(req, nsid)
	}}
	if err := retrying(ctx, func() error {
		return reg.Procedure(ctx, api.MethodRegisterRunner, api.RegisterRunnerInput{Repo: c.repo, Name: name, Labels: labels}, nil)
	}); err != nil {
		return nil, fmt.Errorf("register runner %s: %w", name, err)
	}
	if err := retrying(ctx, func() error {
		return c.admin.Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: c.repo, Name: name}, nil)
	}); err != nil {
		return nil, fmt.Errorf("approve runner %s: %w", name, err)
	}
	// Runner calls but register and startSession carry the session.
	var sess api.StartSessionOutput
	if err := retrying(ctx, func() error {
		return cl.Procedure(ctx, api.MethodStartSession, api.StartSessionInput{Executor: "bench"}, &sess)
	}); err != nil {
		return nil, fmt.Errorf("start session of runner %s: %w", name, err)
	}
	auth := cl.Auth
	cl.Auth = func(req *http.Request, nsid string) error {
		req.Header.Set(api.SessionHeader, sess.Session)
		return auth(req, nsid)
	}
	return cl, nil
}

// watch samples process pid for d: the CPU time it used, its highest VmRSS
// (sampled every 250 ms) and its VmRSS at the end. If perSecond is not
// nil, it receives the CPU of each whole second, as percent of one core.
func watch(ctx context.Context, pid int, d time.Duration, perSecond *[]float64) (cpu time.Duration, peak, end int64, err error) {
	cpu0, err := procCPU(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	deadline := start.Add(d)
	secCPU, secAt := cpu0, start
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := procStatus(pid)
		if err != nil {
			return 0, 0, 0, err
		}
		end = st["VmRSS"]
		peak = max(peak, end)
		if now := time.Now(); perSecond != nil && now.Sub(secAt) >= time.Second {
			if c, err := procCPU(pid); err == nil {
				*perSecond = append(*perSecond, percent(c-secCPU, now.Sub(secAt)))
				secCPU, secAt = c, now
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		case <-tick.C:
		case <-time.After(left):
		}
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	return cpu1 - cpu0, peak, end, nil
}

// selfCPU is the CPU time this program has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percent is cpu as a percentage of one core busy for d.
func percent(cpu, d time.Duration) float64 { return 100 * cpu.Seconds() / d.Seconds() }

func mib(b int64) float64 { return float64(b) / (1 << 20) }
