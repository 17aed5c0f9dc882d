package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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

// IdleResult holds the figures of the idle runners benchmark. Sizes are
// bytes; CPU is percent of one core over the window, of the server process
// (all its threads), not of this program.
type IdleResult struct {
	Runners int     `json:"runners"`
	Wait    int     `json:"claimWaitSeconds"`
	WindowS float64 `json:"windowSeconds"`

	BaselineWindowS float64 `json:"baselineWindowSeconds"`
	BaselineRSS     int64   `json:"baselineRssBytes"` // no runners registered
	BaselineCPU     float64 `json:"baselineCpuPercent"`
	RegisteredRSS   int64   `json:"registeredRssBytes"` // runners registered, none polling

	PeakRSS int64   `json:"peakRssBytes"` // highest VmRSS sampled in the window
	EndRSS  int64   `json:"endRssBytes"`  // VmRSS at the window's end
	HWM     int64   `json:"hwmBytes"`     // VmHWM: the process's peak RSS ever
	Threads int64   `json:"threads"`      // the server's OS threads at the end
	CPU     float64 `json:"cpuPercent"`

	Answered  int64   `json:"pollsAnswered"` // claims answered "nothing" in the window
	Errors    int64   `json:"pollErrors"`
	ClientCPU float64 `json:"clientCpuPercent"` // this program's own, for reference
}

// benchIdle registers n runners with a server process, keeps each in a
// claim long poll for the window, and measures the server's memory and CPU.
func benchIdle(ctx context.Context, bin string, n int, window time.Duration) (*IdleResult, error) {
	c, err := startCluster(ctx, bin, "")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	pid := c.server.cmd.Process.Pid
	res := &IdleResult{Runners: n, Wait: claimWait, WindowS: window.Seconds()}

	base := min(window, 10*time.Second)
	progress("idle: server alone for %s", base)
	res.BaselineWindowS = base.Seconds()
	cpu, _, rss, err := watch(ctx, pid, base)
	if err != nil {
		return nil, err
	}
	res.BaselineCPU, res.BaselineRSS = percent(cpu, base), rss

	progress("idle: registering and approving %d runners", n)
	transport := &http.Transport{MaxIdleConnsPerHost: n + 8, IdleConnTimeout: 2 * time.Minute}
	defer transport.CloseIdleConnections()
	var desc api.DescribeServerOutput
	if err := c.admin.Query(ctx, api.MethodDescribeServer, nil, &desc); err != nil {
		return nil, fmt.Errorf("describe server: %w", err)
	}
	clients, err := registerRunners(ctx, c, desc.DID, transport, n)
	if err != nil {
		return nil, err
	}
	if st, err := procStatus(pid); err == nil {
		res.RegisteredRSS = st["VmRSS"]
	}

	pollCtx, stopPolls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopPolls()
		wg.Wait()
	}()
	var answered, failed atomic.Int64
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pollCtx.Err() == nil {
				var out api.ClaimOutput
				err := cl.Procedure(pollCtx, api.MethodClaim, api.ClaimInput{Wait: claimWait}, &out)
				switch {
				case pollCtx.Err() != nil:
				case err != nil:
					failed.Add(1)
					time.Sleep(time.Second)
				default:
					answered.Add(1)
				}
			}
		}()
	}
	if err := poll(ctx, time.Minute, "every runner to poll", func() (bool, error) {
		var list api.ListRunnersOutput
		if err := c.admin.Query(ctx, api.MethodListRunners, url.Values{"repo": {c.repo}}, &list); err != nil {
			return false, err
		}
		for _, r := range list.Runners {
			if r.LastSeenAt == nil {
				return false, nil
			}
		}
		return len(list.Runners) == n, nil
	}); err != nil {
		return nil, err
	}
	// The last polls finish checking for work and start waiting.
	time.Sleep(500 * time.Millisecond)

	progress("idle: %d runners long-polling; measuring for %s", n, window)
	answered.Store(0)
	failed.Store(0)
	client0 := selfCPU()
	cpu, peak, rss, err := watch(ctx, pid, window)
	if err != nil {
		return nil, err
	}
	res.CPU, res.PeakRSS, res.EndRSS = percent(cpu, window), peak, rss
	res.ClientCPU = percent(selfCPU()-client0, window)
	res.Answered, res.Errors = answered.Load(), failed.Load()
	if st, err := procStatus(pid); err == nil {
		res.HWM, res.Threads = st["VmHWM"], st["Threads"]
	}
	progress("idle: server CPU %.2f%% of a core, RSS peak %.1f MiB, end %.1f MiB; %d polls answered, %d errors",
		res.CPU, mib(res.PeakRSS), mib(res.EndRSS), res.Answered, res.Errors)
	return res, nil
}

// registerRunners makes n runner identities, registers them for c's
// repository and approves them; it returns a client per runner.
func registerRunners(ctx context.Context, c *cluster, audience string, transport http.RoundTripper, n int) ([]*api.Client, error) {
	clients := make([]*api.Client, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			clients[i], errs[i] = registerRunner(ctx, c, audience, transport, fmt.Sprintf("idle-%03d", i))
		}()
	}
	wg.Wait()
	return clients, errors.Join(errs...)
}

func registerRunner(ctx context.Context, c *cluster, audience string, transport http.RoundTripper, name string) (*api.Client, error) {
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
	if err := reg.Procedure(ctx, api.MethodRegisterRunner,
		api.RegisterRunnerInput{Repo: c.repo, Name: name, Labels: []string{"idle"}}, nil); err != nil {
		return nil, fmt.Errorf("register runner %s: %w", name, err)
	}
	if err := c.admin.Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: c.repo, Name: name}, nil); err != nil {
		return nil, fmt.Errorf("approve runner %s: %w", name, err)
	}
	// Runner calls but register and startSession carry the session.
	var sess api.StartSessionOutput
	if err := cl.Procedure(ctx, api.MethodStartSession, api.StartSessionInput{Executor: "bench"}, &sess); err != nil {
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
// (sampled every 250 ms) and its VmRSS at the end.
func watch(ctx context.Context, pid int, d time.Duration) (cpu time.Duration, peak, end int64, err error) {
	cpu0, err := procCPU(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	deadline := time.Now().Add(d)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := procStatus(pid)
		if err != nil {
			return 0, 0, 0, err
		}
		end = st["VmRSS"]
		peak = max(peak, end)
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
