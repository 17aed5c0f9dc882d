// Package scale is `make demo-scale` and its end-to-end test: a real
// PostgreSQL (pgtest), several knotless-server replicas (processes) on it
// sharing one data directory, behind Proxy (Go's httputil.ReverseProxy),
// a real S3 store (s3test: versitygw) that the replicas move ended runs'
// logs into and the runners share a cache through, runners with the
// shell executor, pipelines pushed over git, and one replica killed with
// SIGKILL midway and started again. Check says whether every run ended
// exactly once with its whole log (read back from the bucket, through
// any replica) and nothing was claimed twice.
//
// It starts only local processes on loopback addresses and stops all of
// them before Run returns.
package scale

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/objstore/s3test"
	"knotless.dev/knotless/internal/store/postgres/pgtest"
)

// Config sizes a Run. Zero fields take the demo's values.
type Config struct {
	Bin       string // directory of knotless-server, knotless-run and knotless-agent
	Replicas  int    // server replicas; default 3
	Runners   int    // knotless-run processes (shell executor, capacity 1); default 20
	Pipelines int    // pushes, one run each; default 100
	// Lines is how many lines each run's step prints; default 200.
	Lines int
	// Lease is the servers' --lease; default 5 s.
	Lease   time.Duration
	Timeout time.Duration // for the whole scenario; default 10 minutes
	Out     io.Writer     // progress lines; default io.Discard
}

func (c *Config) fill() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Replicas, 3)
	def(&c.Runners, 20)
	def(&c.Pipelines, 100)
	def(&c.Lines, 200)
	if c.Lease <= 0 {
		c.Lease = 5 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Summary is what a Run saw.
type Summary struct {
	Replicas, Runners, Pipelines int
	Runs                         int            // runs made
	States                       map[string]int // final "state/reason" → runs
	NotFinal                     []int64        // runs not final at the end
	Claims                       int            // claims the database accepted (its ledger of ClaimRun's updates)
	ClaimedTwice                 []int64        // runs the database recorded more than one claim of
	NeverClaimed                 []int64        // runs that started but the database recorded no claim of: the ledger missed one
	FinishedTwice                []int64        // runs with more than one "run finished"
	IncompleteLogs               []int64        // runs whose step log is not the whole expected text
	NotMoved                     []int64        // ended runs whose log the replicas did not move to the bucket in time
	CacheHits, CacheDownloads    int            // runs whose setup log says the cache was a hit; of them, downloaded from the store
	Killed                       string         // which replica was killed, when
	PushTook, AllFinalTook       time.Duration
	FirstStep                    []time.Duration // push → first step running, per run
}

// OK reports whether every run ended exactly once, succeeded, with its
// whole log, and none was claimed twice.
func (s Summary) OK() bool {
	return s.Runs == s.Pipelines && len(s.NotFinal)+len(s.ClaimedTwice)+len(s.NeverClaimed)+len(s.FinishedTwice)+len(s.IncompleteLogs)+len(s.NotMoved) == 0 &&
		s.States[api.StateSucceeded+"/"] == s.Runs
}

// String prints the summary, one fact a line.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replicas %d, runners %d, pipelines %d, runs %d\n", s.Replicas, s.Runners, s.Pipelines, s.Runs)
	fmt.Fprintf(&b, "killed: %s\n", s.Killed)
	keys := make([]string, 0, len(s.States))
	for k := range s.States {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-30s %d\n", strings.TrimSuffix(k, "/"), s.States[k])
	}
	fmt.Fprintf(&b, "not final: %v\nclaims in the database: %d; claimed twice: %v; never claimed: %v\nfinished twice: %v\nincomplete logs: %v\n",
		s.NotFinal, s.Claims, s.ClaimedTwice, s.NeverClaimed, s.FinishedTwice, s.IncompleteLogs)
	fmt.Fprintf(&b, "logs not moved to the object store: %v; runs that restored the cache: %d (downloaded from the store: %d)\n", s.NotMoved, s.CacheHits, s.CacheDownloads)
	fmt.Fprintf(&b, "pushes took %s; all runs final %s after the first push\n", s.PushTook.Round(time.Millisecond), s.AllFinalTook.Round(time.Millisecond))
	if len(s.FirstStep) > 0 {
		d := append([]time.Duration(nil), s.FirstStep...)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		fmt.Fprintf(&b, "push → first step running: p50 %s, p95 %s, max %s\n", d[len(d)/2].Round(time.Millisecond),
			d[len(d)*95/100].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
	}
	verdict := "OK: every run ended exactly once with its whole log, moved to the object store; nothing was claimed twice"
	if !s.OK() {
		verdict = "FAILED"
	}
	b.WriteString(verdict + "\n")
	return b.String()
}

// world is one scenario's processes and files.
type world struct {
	cfg     Config
	root    string
	data    string
	s3      *s3test.Server
	dbURL   string
	ports   []int
	servers []*exec.Cmd
	runners []*exec.Cmd
	proxy   *http.Server
	url     string // the proxy's
	token   string // admin's
	client  *api.Client
}

// Run runs the scenario and returns what it saw; err is for a scenario
// that could not run (a process that did not start), not for a failed
// check (see Summary.OK).
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg.fill()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	sum := Summary{Replicas: cfg.Replicas, Runners: cfg.Runners, Pipelines: cfg.Pipelines, States: map[string]int{}}
	bin, err := pgtest.Bin()
	if err != nil {
		return sum, err
	}
	pg, err := pgtest.StartServer(ctx, bin)
	if err != nil {
		return sum, err
	}
	defer pg.Stop()
	w := &world{cfg: cfg}
	if w.dbURL, err = pg.NewDatabase(ctx); err != nil {
		return sum, err
	}
	if w.root, err = os.MkdirTemp("", "knotless-scale-"); err != nil {
		return sum, err
	}
	defer os.RemoveAll(w.root)
	w.data = filepath.Join(w.root, "data")
	if w.s3, err = s3test.Run(filepath.Join(w.root, "s3"), "127.0.0.1:0"); err != nil {
		return sum, err
	}
	defer w.s3.Stop()
	defer w.stopAll()
	if err := w.start(ctx); err != nil {
		return sum, err
	}
	if err := w.recordClaims(ctx); err != nil {
		return sum, err
	}
	fmt.Fprintf(cfg.Out, "%d replicas on PostgreSQL behind %s; %d runners (shell executor)\n", cfg.Replicas, w.url, cfg.Runners)
	return w.scenario(ctx, sum)
}

func (w *world) start(ctx context.Context) error {
	for range w.cfg.Replicas {
		p, err := pgtest.FreePort()
		if err != nil {
			return err
		}
		w.ports = append(w.ports, p)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	w.url = "http://" + ln.Addr().String()
	var backends []string
	for _, p := range w.ports {
		backends = append(backends, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	proxy, err := NewProxy(backends)
	if err != nil {
		return err
	}
	w.proxy = &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go w.proxy.Serve(ln)
	w.servers = make([]*exec.Cmd, w.cfg.Replicas)
	for i := range w.cfg.Replicas {
		if err := w.startServer(ctx, i); err != nil {
			return err
		}
	}
	tok, err := os.ReadFile(filepath.Join(w.data, "admin.token"))
	if err != nil {
		return err
	}
	w.token = strings.TrimSpace(string(tok))
	w.client = &api.Client{BaseURL: w.url, Auth: api.BearerToken(w.token)}
	if err := w.client.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: "app"}, nil); err != nil {
		return fmt.Errorf("create repository: %w", err)
	}
	for i := range w.cfg.Runners {
		if err := w.startRunner(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// startServer starts replica i (again) and waits until its /readyz says
// ready.
func (w *world) startServer(ctx context.Context, i int) error {
	listen := fmt.Sprintf("127.0.0.1:%d", w.ports[i])
	logf, err := os.OpenFile(w.serverLog(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(w.cfg.Bin, "knotless-server"), "--data", w.data, "--database", w.dbURL,
		"--listen", listen, "--url", w.url, "--lease", w.cfg.Lease.String(), "--max-conns-per-client", "4096",
		"--max-registrations-per-minute", "100000", "--object-store", w.s3.BucketURL(w.s3.URL, "server"))
	cmd.Env = append(os.Environ(), w.s3.Env()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start replica %d: %w", i, err)
	}
	go func() { cmd.Wait(); logf.Close() }()
	w.servers[i] = cmd
	return waitFor(ctx, 60*time.Second, fmt.Sprintf("replica %d to be ready", i), func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (w *world) serverLog(i int) string {
	return filepath.Join(w.root, fmt.Sprintf("replica-%d.log", i))
}

// startRunner registers runner i (knotless-run login with a registration
// token, approved with its DID) and starts it.
func (w *world) startRunner(ctx context.Context, i int) error {
	name := fmt.Sprintf("r%02d", i)
	var reg api.RegistrationToken
	if err := w.client.Procedure(ctx, api.MethodCreateRegistrationToken, api.CreateRegistrationTokenInput{Repo: "admin/app"}, &reg); err != nil {
		return fmt.Errorf("registration token: %w", err)
	}
	state := filepath.Join(w.root, name+".json")
	login := exec.CommandContext(ctx, filepath.Join(w.cfg.Bin, "knotless-run"), "login", "--server", w.url, "--repo", "admin/app",
		"--name", name, "--state", state)
	login.Env = append(os.Environ(), "KNOTLESS_REGISTRATION_TOKEN="+reg.Token, "HOME="+w.root)
	out, err := login.CombinedOutput()
	if err != nil {
		return fmt.Errorf("knotless-run login %s: %w\n%s", name, err, out)
	}
	did := regexp.MustCompile(`--did (did:key:\S+)`).FindStringSubmatch(string(out))
	if did == nil {
		return fmt.Errorf("knotless-run login printed no DID:\n%s", out)
	}
	if err := w.client.Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: "admin/app", Name: name, DID: did[1]}, nil); err != nil {
		return fmt.Errorf("approve %s: %w", name, err)
	}
	logf, err := os.Create(filepath.Join(w.root, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(w.cfg.Bin, "knotless-run"), "run", "--state", state, "--executor", "shell",
		"--work", filepath.Join(w.root, name+"-work"), "--capacity", "1", "--cache-store", w.s3.BucketURL(w.s3.URL, "caches"))
	cmd.Env = append(append(os.Environ(), "HOME="+w.root), w.s3.Env()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	go func() { cmd.Wait(); logf.Close() }()
	w.runners = append(w.runners, cmd)
	return nil
}

// workflow is the one workflow: a step that prints lines lines, slowly
// enough that runs are in flight when a replica dies, and a cache that
// the first runs save and later ones, on other runners, restore.
func (w *world) workflow() string {
	return fmt.Sprintf(`on:
  push: {}
caches:
  - key: deps-v1
    paths: [deps]
steps:
  - name: count
    run: |
      mkdir -p deps && date > deps/stamp
      for i in $(seq 1 %d); do echo "line $i"; done
      sleep 1
      echo done
`, w.cfg.Lines)
}

// wantLog is the whole log of that step.
func (w *world) wantLog() string {
	var b strings.Builder
	for i := 1; i <= w.cfg.Lines; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String() + "done\n"
}

func (w *world) scenario(ctx context.Context, sum Summary) (Summary, error) {
	src := filepath.Join(w.root, "src")
	if err := os.MkdirAll(filepath.Join(src, ".knotless", "workflows"), 0o755); err != nil {
		return sum, err
	}
	if err := os.WriteFile(filepath.Join(src, ".knotless", "workflows", "ci.yml"), []byte(w.workflow()), 0o644); err != nil {
		return sum, err
	}
	if _, err := w.git(ctx, src, "init", "-q", "-b", "main"); err != nil {
		return sum, err
	}
	killAt := w.cfg.Pipelines / 2
	victim := w.cfg.Replicas / 2
	start := time.Now()
	for n := 1; n <= w.cfg.Pipelines; n++ {
		if err := os.WriteFile(filepath.Join(src, "n"), []byte(strconv.Itoa(n)), 0o644); err != nil {
			return sum, err
		}
		if _, err := w.git(ctx, src, "add", "-A"); err != nil {
			return sum, err
		}
		if _, err := w.git(ctx, src, "commit", "-q", "-m", fmt.Sprint("push ", n)); err != nil {
			return sum, err
		}
		if err := w.push(ctx, src); err != nil {
			return sum, err
		}
		if n == killAt {
			// SIGKILL: no shutdown, no handover; its connections just end.
			_ = w.servers[victim].Process.Signal(syscall.SIGKILL)
			sum.Killed = fmt.Sprintf("replica %d (SIGKILL) after push %d of %d, %s in", victim, n, w.cfg.Pipelines, time.Since(start).Round(time.Millisecond))
			fmt.Fprintf(w.cfg.Out, "killed %s\n", sum.Killed)
		}
		if n == killAt+max(w.cfg.Pipelines/10, 1) {
			if err := w.startServer(ctx, victim); err != nil {
				return sum, err
			}
			sum.Killed += fmt.Sprintf("; started again after push %d", n)
			fmt.Fprintf(w.cfg.Out, "replica %d started again after push %d\n", victim, n)
		}
		if n%max(w.cfg.Pipelines/10, 1) == 0 {
			fmt.Fprintf(w.cfg.Out, "pushed %d of %d\n", n, w.cfg.Pipelines)
		}
	}
	sum.PushTook = time.Since(start)
	var runs []api.Run
	err := waitFor(ctx, w.cfg.Timeout, "every run to end", func() bool {
		var err error
		runs, err = w.allRuns(ctx)
		if err != nil || len(runs) < w.cfg.Pipelines {
			return false
		}
		for _, r := range runs {
			if !api.IsFinal(r.State) {
				return false
			}
		}
		return true
	})
	sum.AllFinalTook = time.Since(start)
	if err != nil {
		fmt.Fprintf(w.cfg.Out, "%v\n", err)
	}
	return w.check(ctx, sum, runs)
}

// push pushes HEAD to main through the proxy, again when the replica that
// had it died under it (a 502).
func (w *world) push(ctx context.Context, src string) error {
	var err error
	for range 5 {
		var out string
		out, err = w.git(ctx, src, "push", "-q", w.url+"/admin/app.git", "HEAD:refs/heads/main")
		if err == nil {
			return nil
		}
		err = fmt.Errorf("%w: %s", err, out)
	}
	return err
}

func (w *world) git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	auth := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+w.token))
	cmd.Env = append(os.Environ(), "HOME="+w.root, "GIT_AUTHOR_NAME=scale", "GIT_AUTHOR_EMAIL=scale@example.com",
		"GIT_COMMITTER_NAME=scale", "GIT_COMMITTER_EMAIL=scale@example.com", "GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0="+auth)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// allRuns lists every run of admin/app, page by page.
func (w *world) allRuns(ctx context.Context) ([]api.Run, error) {
	var all []api.Run
	cursor := ""
	for {
		q := map[string][]string{"repo": {"admin/app"}, "limit": {"500"}}
		if cursor != "" {
			q["cursor"] = []string{cursor}
		}
		var out api.ListRunsOutput
		if err := w.client.Query(ctx, api.MethodListRuns, q, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Runs...)
		if out.Cursor == "" || len(out.Runs) == 0 {
			return all, nil
		}
		cursor = out.Cursor
	}
}

// check fills sum from the runs, their logs, the database's claims and
// the replicas' logs.
func (w *world) check(ctx context.Context, sum Summary, runs []api.Run) (Summary, error) {
	sum.Runs = len(runs)
	sum.NotMoved = w.waitMoved(ctx, runs)
	want := w.wantLog()
	for _, r := range runs {
		if setup, err := w.stepLog(ctx, r.ID, 0); err == nil && strings.Contains(setup, ": hit") {
			sum.CacheHits++
			if strings.Contains(setup, "hit (downloaded") {
				sum.CacheDownloads++
			}
		}
		if !api.IsFinal(r.State) {
			sum.NotFinal = append(sum.NotFinal, r.ID)
			continue
		}
		sum.States[r.State+"/"+r.Reason]++
		resp, err := w.client.Do(ctx, http.MethodGet, api.MethodGetRunLog,
			map[string][]string{"run": {fmt.Sprint(r.ID)}, "step": {"1"}}, "", nil)
		if err != nil {
			sum.IncompleteLogs = append(sum.IncompleteLogs, r.ID)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != want {
			sum.IncompleteLogs = append(sum.IncompleteLogs, r.ID)
		}
		if r.StartedAt != nil { // the run is created by its push
			sum.FirstStep = append(sum.FirstStep, r.StartedAt.Sub(r.CreatedAt))
		}
	}
	if err := w.checkClaims(ctx, &sum, runs); err != nil {
		return sum, err
	}
	finished := map[int64]int{}
	finishRE := regexp.MustCompile(`msg="run finished" run=(\d+)`)
	for i := range w.cfg.Replicas {
		f, err := os.Open(w.serverLog(i))
		if err != nil {
			return sum, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := finishRE.FindStringSubmatch(sc.Text()); m != nil {
				id, _ := strconv.ParseInt(m[1], 10, 64)
				finished[id]++
			}
		}
		f.Close()
	}
	for id, n := range finished {
		if n > 1 {
			sum.FinishedTwice = append(sum.FinishedTwice, id)
		}
	}
	return sum, nil
}

// waitMoved waits up to a minute for every ended run's step log to be in
// the bucket (a file of the store's directory: versitygw keeps objects as
// files) and returns the runs whose log is not.
func (w *world) waitMoved(ctx context.Context, runs []api.Run) []int64 {
	var missing []int64
	_ = waitFor(ctx, time.Minute, "ended runs' logs moved to the object store", func() bool {
		missing = missing[:0]
		for _, r := range runs {
			obj := filepath.Join(w.s3.Dir, w.s3.Bucket, "server", "logs", fmt.Sprint(r.ID), "1.log")
			if _, err := os.Stat(obj); api.IsFinal(r.State) && err != nil {
				missing = append(missing, r.ID)
			}
		}
		return len(missing) == 0
	})
	return missing
}

// stepLog is a step's whole log, read through the proxy.
func (w *world) stepLog(ctx context.Context, run int64, step int) (string, error) {
	resp, err := w.client.Do(ctx, http.MethodGet, api.MethodGetRunLog,
		map[string][]string{"run": {fmt.Sprint(run)}, "step": {fmt.Sprint(step)}}, "", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// stopAll stops the runners (SIGINT: they finish, then exit), then the
// replicas and the proxy, killing what does not stop within 30 s.
func (w *world) stopAll() {
	stop := func(cmds []*exec.Cmd, sig os.Signal) {
		for _, c := range cmds {
			if c != nil && c.Process != nil && c.ProcessState == nil {
				_ = c.Process.Signal(sig)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for _, c := range cmds {
			for c != nil && c.Process != nil && c.ProcessState == nil && time.Now().Before(deadline) &&
				syscall.Kill(c.Process.Pid, 0) == nil {
				time.Sleep(20 * time.Millisecond) // polling for the process to exit, bounded
			}
			if c != nil && c.Process != nil {
				_ = c.Process.Kill()
			}
		}
	}
	stop(w.runners, syscall.SIGINT)
	stop(w.servers, syscall.SIGTERM)
	if w.proxy != nil {
		w.proxy.Close()
	}
}

// waitFor polls cond every 50 ms until it holds, ctx ends or d passes.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
