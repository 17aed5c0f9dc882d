package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"knotless.dev/knotless/internal/api"
)

// The local cluster's state directory (test/cluster; KNOTLESS_TEST_CLUSTER
// overrides it, as for the tests): admin.kubeconfig and logs/audit*.log.
const (
	clusterStateEnv = "KNOTLESS_TEST_CLUSTER"
	clusterStateDir = "/var/lib/knotless-test-cluster"
)

// localCluster is the local cluster as the burst benchmark uses it.
type localCluster struct {
	Client     kubernetes.Interface
	Kubeconfig string // the admin's
	AuditLog   string // the API server's audit log (JSON lines)
}

// createBenchNamespace creates a namespace named prefix and a random tail,
// Pod Security "restricted", labelled as the kube tests' are.
func createBenchNamespace(ctx context.Context, kc *localCluster, prefix string) (string, error) {
	ns, err := kc.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: prefix,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest", "knotless.dev/test": "kubetest"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	return ns.Name, nil
}

// loadLocalCluster reads the admin kubeconfig from the local cluster's
// state directory and checks that the API server answers /readyz.
func loadLocalCluster(ctx context.Context) (*localCluster, error) {
	dir := os.Getenv(clusterStateEnv)
	if dir == "" {
		dir = clusterStateDir
	}
	kc := &localCluster{Kubeconfig: filepath.Join(dir, "admin.kubeconfig"), AuditLog: filepath.Join(dir, "logs", "audit.log")}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", kc.Kubeconfig, err)
	}
	if kc.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := kc.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx); err != nil {
		return nil, fmt.Errorf("GET %s/readyz: %w", cfg.Host, err)
	}
	return kc, nil
}

// burstLines is how many numbered lines each burst step prints after its
// clock: the log is whole when all of them are there, in order.
const burstLines = 200

// burstWorkflow is workflow i of a burst: one step that first prints the
// kernel's uptime (/proc/uptime, 10 ms resolution: the job image's busybox
// date has no %N), then burstLines numbered lines.
func burstWorkflow(i int) string {
	return fmt.Sprintf(`name: burst-%03d
on:
  push:
    branches: ["**"]
runners: [bench]
steps:
  - name: clock
    run: |
      cat /proc/uptime
      i=0; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); done
`, i, burstLines)
}

// KubeBurstResult holds the figures of the kube burst benchmark: one kube
// runner with --capacity Runs, Runs runs pushed at once (one push, one
// workflow each), cold (no warm pod) and, unless WarmPods is 0, again with
// a warm pool of WarmPods.
type KubeBurstResult struct {
	Runs      int    `json:"runs"`
	CPUs      string `json:"cpus"`   // each job pod's --cpus (requests = limits)
	Memory    string `json:"memory"` // each job pod's --memory
	Namespace string `json:"namespace"`
	// StepClock says how the step's own clock is read.
	StepClock string      `json:"stepClock"`
	Cold      *BurstPhase `json:"cold"`
	Warm      *BurstPhase `json:"warm,omitempty"`
	// Floor is the same burst made by a bare client-go program
	// (bench/kubefloor.go), unless -kube-floor=false.
	Floor *FloorResult `json:"floor,omitempty"`
}

// BurstPhase is one burst: durations in ms, from each run's queued time
// (the server's created_at) to its step's own clock.
type BurstPhase struct {
	WarmPods  int    `json:"warmPods"`
	Succeeded int    `json:"succeeded"`
	Lost      int    `json:"notSucceeded"` // runs not final succeeded in time
	WholeLogs int    `json:"wholeLogs"`    // step logs with every line, in order
	FirstStep Spread `json:"queuedToFirstStep"`
	// PodRunning and AgentConnected are what each setup log says: the job
	// pod created → Running (not for a run that took a warm pod), and the
	// step agent copied in → connected.
	PodRunning     Spread  `json:"podCreatedToRunning"`
	AgentConnected Spread  `json:"agentDeliveredAndConnected"`
	TookWarm       int     `json:"tookWarmPod"` // runs whose setup log says they took a warm pod
	LastStartS     float64 `json:"queuedToLastFirstStepSeconds"`
	// RunnerPeakRSS is the runner's highest VmRSS sampled during the
	// burst (every 250 ms); RunnerCPU its CPU time from the push to the
	// last run final, in seconds, and as percent of one core.
	RunnerPeakRSS    int64   `json:"runnerPeakRssBytes"`
	RunnerCPUSeconds float64 `json:"runnerCpuSeconds"`
	RunnerCPUPercent float64 `json:"runnerCpuPercent"`
	WallS            float64 `json:"pushToAllFinalSeconds"`
	// Requests is the runner's API requests per run, by "verb resource",
	// read from the API server's audit log (warm pods' refills included).
	Requests map[string]float64 `json:"apiRequestsPerRun"`
	// Unschedulable is how many job pods the scheduler first refused
	// (FailedScheduling events in the namespace, from the audit log).
	Unschedulable int `json:"podsFirstUnschedulable"`

	// jobPod is the body of the runner's first `create pods` request in
	// the burst (audit log), for the floor's spec check.
	jobPod json.RawMessage
}

// Spread is a set of durations in ms: nearest-rank percentiles.
type Spread struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50Ms"`
	P99 float64 `json:"p99Ms"`
	Min float64 `json:"minMs"`
	Max float64 `json:"maxMs"`
}

func spread(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p int) float64 { return msf(s[max(0, (len(s)*p+99)/100-1)]) }
	return Spread{N: len(s), P50: rank(50), P99: rank(99), Min: msf(s[0]), Max: msf(s[len(s)-1])}
}

// kubeBurstName is the name -only takes for the kube burst benchmark. It
// is not in the default list: it needs the local cluster (make cluster-up).
const kubeBurstName = "kubeburst"

// burstConfig is what the kubeburst flags ask for.
type burstConfig struct {
	runs, warm                int
	cpus, memory, disk, image string
}

// kubeBurstFlags are the kubeburst benchmark's flags, registered before
// main parses them.
var kubeBurstFlags = func() *burstConfig {
	bc := &burstConfig{}
	flag.IntVar(&bc.runs, "kube-runs", 100, "kubeburst benchmark: runs pushed at once (one push, a workflow each) to one kube runner with --capacity of as many")
	flag.IntVar(&bc.warm, "kube-warm", 10, "kubeburst benchmark: the warm pool (--warm-pods) of the second burst; 0 runs the cold burst only")
	flag.StringVar(&bc.cpus, "kube-cpus", "10m", "kubeburst benchmark: each job pod's CPU (--cpus; requests = limits), small so that -kube-runs pods fit the node")
	flag.StringVar(&bc.memory, "kube-memory", "64Mi", "kubeburst benchmark: each job pod's memory (--memory)")
	flag.StringVar(&bc.disk, "kube-disk", "64Mi", "kubeburst benchmark: each job pod's ephemeral storage (--disk)")
	flag.StringVar(&bc.image, "kube-image", "localhost/knotless/job-base:1", "kubeburst benchmark: the job image (--image; the local cluster's job-base image by default)")
	return bc
}()

// benchKubeBurst runs the kube burst benchmark against the local cluster
// (test/cluster, `make cluster-up`): a namespace of its own, a runner with
// the cluster's admin kubeconfig (its requests are told apart in the audit
// log by namespace), cold and then warm.
func benchKubeBurst(ctx context.Context, bin string, bc *burstConfig) (*KubeBurstResult, error) {
	if bc.runs < 1 || bc.warm < 0 {
		return nil, fmt.Errorf("-kube-runs must be at least 1 and -kube-warm at least 0")
	}
	if err := checkFloorFlags(); err != nil {
		return nil, err
	}
	kc, err := loadLocalCluster(ctx)
	if err != nil {
		return nil, fmt.Errorf("the local cluster (make cluster-up): %w", err)
	}
	ns, err := createBenchNamespace(ctx, kc, "kburst-")
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = kc.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	}()
	c, err := startCluster(ctx, bin, "")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	res := &KubeBurstResult{Runs: bc.runs, CPUs: bc.cpus, Memory: bc.memory, Namespace: ns,
		StepClock: "/proc/uptime in the job pod + this machine's boot time (the node is this machine)"}
	flags := []string{"--executor", "kube", "--kubeconfig", kc.Kubeconfig,
		"--namespace", ns, "--image", bc.image, "--cpus", bc.cpus, "--memory", bc.memory,
		"--disk", bc.disk, "--capacity", strconv.Itoa(bc.runs), "--stop-wait", "30s"}
	w := burstWorld{c: c, kc: kc, ns: ns, n: bc.runs}
	// The floor and the cold burst one after the other, each from a
	// quiet cluster (quietCluster), the floor first unless -kube-floor-order
	// after; the warm burst last (its runner leaves its warm pods).
	floor := func() error {
		if !*kubeFloorOn {
			return nil
		}
		res.Floor, err = benchFloor(ctx, kc, bc, *kubeFloorOrder, ns)
		return err
	}
	if *kubeFloorOrder == "before" {
		if err := floor(); err != nil {
			return res, err
		}
	}
	if res.Cold, err = w.phase(ctx, "burst-cold", 0, flags); err != nil {
		return res, fmt.Errorf("cold: %w", err)
	}
	if *kubeFloorOrder == "after" {
		if err := floor(); err != nil {
			return res, err
		}
	}
	if res.Floor != nil {
		p, err := floorPod(res.Floor.Namespace, "", "", bc)
		if err != nil {
			return res, err
		}
		res.Floor.SpecCheck = specCheck(p, res.Cold.jobPod)
	}
	if bc.warm > 0 {
		if res.Warm, err = w.phase(ctx, "burst-warm", bc.warm, append(flags, "--warm-pods", strconv.Itoa(bc.warm))); err != nil {
			return res, fmt.Errorf("warm: %w", err)
		}
	}
	return res, nil
}

// burstWorld is one burst benchmark's server, cluster and namespace.
type burstWorld struct {
	c    *cluster
	kc   *localCluster
	ns   string
	n    int
	push int // pushes made
}

// phase waits until the namespace holds no pod, starts runner name with
// flags, waits for its warm pods, pushes n runs at once, waits until all
// are final, reads their figures and stops the runner (SIGTERM).
func (w *burstWorld) phase(ctx context.Context, name string, warm int, flags []string) (*BurstPhase, error) {
	// The phase before deleted its job pods as its runs ended; the
	// floor its pods.
	if err := quietCluster(ctx, w.kc.Client, shimSettle(w.n), w.ns); err != nil {
		return nil, err
	}
	if err := w.c.startRunner(ctx, name, flags...); err != nil {
		return nil, err
	}
	p := w.c.runner(name)
	defer w.stopRunner(p)
	if err := w.c.waitRunnerPolling(ctx, name); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, w.c.logTails())
	}
	if err := poll(ctx, 5*time.Minute, fmt.Sprintf("%d warm pods ready", warm), func() (bool, error) {
		b, _ := os.ReadFile(p.log)
		return strings.Count(string(b), `msg="warm pod ready"`) >= warm, nil
	}); err != nil {
		return nil, err
	}
	sha, err := w.commitBurst(ctx)
	if err != nil {
		return nil, err
	}
	sampled := make(chan int64, 1)
	stop := make(chan struct{})
	go func() { sampled <- peakRSS(p.cmd.Process.Pid, stop) }()
	cpu0, _ := procCPU(p.cmd.Process.Pid)
	t0 := time.Now()
	if err := w.c.push(ctx); err != nil {
		close(stop)
		return nil, err
	}
	runs, err := w.waitAllFinal(ctx, sha)
	wall := time.Since(t0)
	cpu1, _ := procCPU(p.cmd.Process.Pid)
	close(stop)
	ph := &BurstPhase{WarmPods: warm, RunnerPeakRSS: <-sampled, WallS: wall.Seconds(),
		RunnerCPUSeconds: (cpu1 - cpu0).Seconds(), RunnerCPUPercent: percent(cpu1-cpu0, wall)}
	if err != nil {
		return ph, fmt.Errorf("%w\n%s", err, w.c.logTails())
	}
	if err := w.readRuns(ctx, runs, ph); err != nil {
		return ph, err
	}
	a, err := auditScan(ctx, w.kc.AuditLog, w.ns, t0, time.Now(), func(ua string) bool {
		// The exec streams' upgrade carries Go's user agent.
		return strings.HasPrefix(ua, "knotless-run/") || strings.HasPrefix(ua, "Go-http-client/")
	})
	if err == nil {
		ph.Requests, ph.Unschedulable, ph.jobPod = perRun(a.counts, len(runs)), len(a.unsched), a.jobPod
	}
	progress("kubeburst %s: %d runs, %d succeeded, %d whole logs, queued → first step p50 %.0f ms p99 %.0f ms",
		name, len(runs), ph.Succeeded, ph.WholeLogs, ph.FirstStep.P50, ph.FirstStep.P99)
	return ph, err
}

// stopRunner stops the runner process (SIGTERM, its runs are final by
// then); the warm pods it leaves go with the namespace.
func (w *burstWorld) stopRunner(p *proc) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// commitBurst writes the n burst workflows into the checkout and commits
// them with a new iteration file; it returns the commit's SHA.
func (w *burstWorld) commitBurst(ctx context.Context) (string, error) {
	dir := filepath.Join(w.c.git, ".knotless", "workflows")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for i := range w.n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("burst-%03d.yml", i)), []byte(burstWorkflow(i)), 0o644); err != nil {
			return "", err
		}
	}
	w.push++
	if err := os.WriteFile(filepath.Join(w.c.git, "iteration"), []byte(fmt.Sprintln(w.push)), 0o644); err != nil {
		return "", err
	}
	if w.push == 1 {
		if _, err := w.c.gitCmd(ctx, "init", "-q", "-b", "main"); err != nil {
			return "", err
		}
	}
	if _, err := w.c.gitCmd(ctx, "add", "-A"); err != nil {
		return "", err
	}
	if _, err := w.c.gitCmd(ctx, "commit", "-q", "-m", fmt.Sprint("burst ", w.push)); err != nil {
		return "", err
	}
	return w.c.gitCmd(ctx, "rev-parse", "HEAD")
}

// waitAllFinal finds the n runs of commit sha and waits until every one is
// final (3 minutes plus a second per run at most).
func (w *burstWorld) waitAllFinal(ctx context.Context, sha string) ([]api.Run, error) {
	var runs []api.Run
	err := pollEvery(ctx, 500*time.Millisecond, 3*time.Minute+time.Duration(w.n)*time.Second,
		fmt.Sprintf("%d runs of %s final", w.n, sha[:8]), func() (bool, error) {
			var list api.ListRunsOutput
			if err := w.c.admin.Query(ctx, api.MethodListRuns, url.Values{"repo": {w.c.repo}, "limit": {strconv.Itoa(2*w.n + 10)}}, &list); err != nil {
				return false, err
			}
			runs = runs[:0]
			final := 0
			for _, r := range list.Runs {
				if r.SHA == sha {
					runs = append(runs, r)
					if api.IsFinal(r.State) {
						final++
					}
				}
			}
			return len(runs) == w.n && final == w.n, nil
		})
	return runs, err
}

// readRuns fills ph's run figures: states, whole logs, queued → the
// step's own clock.
func (w *burstWorld) readRuns(ctx context.Context, runs []api.Run, ph *BurstPhase) error {
	boot, err := bootTime()
	if err != nil {
		return err
	}
	var first, running, agent []time.Duration
	var last time.Duration
	for _, r := range runs {
		if r.State != api.StateSucceeded {
			ph.Lost++
			progress("kubeburst: run %d ended %s %s: %s", r.ID, r.State, r.Reason, r.Message)
			continue
		}
		ph.Succeeded++
		up, whole, err := w.stepLog(ctx, r.ID)
		if err != nil {
			return err
		}
		if whole {
			ph.WholeLogs++
		}
		if err := w.setupFigures(ctx, r.ID, &running, &agent, &ph.TookWarm); err != nil {
			return err
		}
		d := boot.Add(up).Sub(r.CreatedAt)
		first = append(first, d)
		last = max(last, d)
	}
	ph.FirstStep, ph.LastStartS = spread(first), last.Seconds()
	ph.PodRunning, ph.AgentConnected = spread(running), spread(agent)
	return nil
}

var (
	setupRunning = regexp.MustCompile(`kube executor: pod running on node \S+ after (\S+)`)
	setupAgent   = regexp.MustCompile(`kube executor: step agent .* delivered \(.*\) and connected in (\S+?);`)
)

// setupFigures reads run's setup log for the pod's create → Running and
// the agent's delivery, appending what it says to running and agent.
func (w *burstWorld) setupFigures(ctx context.Context, run int64, running, agent *[]time.Duration, warm *int) error {
	resp, err := w.c.admin.Do(ctx, http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {"0"}}, "", nil)
	if err != nil {
		return fmt.Errorf("read setup log of run %d: %w", run, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read setup log of run %d: %w", run, err)
	}
	if strings.Contains(string(b), "took the warm pod") {
		*warm++
	}
	for re, dst := range map[*regexp.Regexp]*[]time.Duration{setupRunning: running, setupAgent: agent} {
		if m := re.FindSubmatch(b); m != nil {
			if d, err := time.ParseDuration(string(m[1])); err == nil {
				*dst = append(*dst, d)
			}
		}
	}
	return nil
}

// stepLog reads run's step 1 log whole: the uptime it printed first, and
// whether every numbered line follows in order.
func (w *burstWorld) stepLog(ctx context.Context, run int64) (time.Duration, bool, error) {
	resp, err := w.c.admin.Do(ctx, http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {"1"}}, "", nil)
	if err != nil {
		return 0, false, fmt.Errorf("read log of run %d: %w", run, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, fmt.Errorf("read log of run %d: %w", run, err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	f := strings.Fields(lines[0])
	if len(f) == 0 {
		return 0, false, fmt.Errorf("run %d's step printed %q first, want /proc/uptime", run, lines[0])
	}
	sec, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, false, fmt.Errorf("run %d's step printed %q first, want /proc/uptime", run, lines[0])
	}
	whole := len(lines) == burstLines+1
	for i := 1; whole && i < len(lines); i++ {
		whole = lines[i] == fmt.Sprintf("line %d", i-1)
	}
	return time.Duration(sec * float64(time.Second)), whole, nil
}

// bootTime is when this machine's kernel started, to the clock's
// precision: now minus /proc/uptime.
func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/uptime")
	now := time.Now()
	if err != nil {
		return time.Time{}, err
	}
	sec, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("read /proc/uptime: %w", err)
	}
	return now.Add(-time.Duration(sec * float64(time.Second))), nil
}

// peakRSS samples pid's VmRSS every 250 ms until stop is closed and
// returns the highest.
func peakRSS(pid int, stop <-chan struct{}) int64 {
	var peak int64
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		if st, err := procStatus(pid); err == nil {
			peak = max(peak, st["VmRSS"])
		}
		select {
		case <-stop:
			return peak
		case <-t.C:
		}
	}
}

// auditFigures is what auditScan read of one namespace's requests.
type auditFigures struct {
	counts  map[string]float64 // requests by "verb resource[/sub]"
	unsched map[string]bool    // pods with a FailedScheduling event
	jobPod  json.RawMessage    // the body of the first counted `create pods`
}

// auditScan reads the API server's audit log (logPath and its rotated
// audit-*.log beside it) for namespace ns's requests between from and to:
// those whose user agent ours accepts, on any resource but the namespace
// itself, counted by "verb resource[/sub]"; the scheduler's
// FailedScheduling events; the first counted pod create's request body.
func auditScan(ctx context.Context, logPath, ns string, from, to time.Time, ours func(userAgent string) bool) (auditFigures, error) {
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(logPath), "audit*.log"))
	a := auditFigures{counts: map[string]float64{}, unsched: map[string]bool{}}
	for _, path := range files {
		if st, err := os.Stat(path); err != nil || st.ModTime().Before(from) {
			continue
		}
		if err := a.scanFile(ctx, path, ns, from, to, ours); err != nil {
			return a, err
		}
	}
	return a, nil
}

// perRun is counts divided by runs.
func perRun(counts map[string]float64, runs int) map[string]float64 {
	out := make(map[string]float64, len(counts))
	for k, v := range counts {
		out[k] = v / float64(max(runs, 1))
	}
	return out
}

// auditLine is what auditScan reads of one audit event (audit.k8s.io/v1).
type auditLine struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time       `json:"requestReceivedTimestamp"`
	RequestObject            json.RawMessage `json:"requestObject"`
}

// auditEvent is what auditScan reads of an event's body.
type auditEvent struct {
	Reason    string `json:"reason"`
	Regarding struct {
		Name string `json:"name"`
	} `json:"regarding"`
}

func (a *auditFigures) scanFile(ctx context.Context, path, ns string, from, to time.Time, ours func(string) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("the API server's audit log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	quoted := []byte(`"` + ns + `"`)
	for sc.Scan() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !bytes.Contains(sc.Bytes(), quoted) {
			continue
		}
		var e auditLine
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" || e.ObjectRef == nil ||
			e.ObjectRef.Namespace != ns || e.RequestReceivedTimestamp.Before(from) || e.RequestReceivedTimestamp.After(to) {
			continue
		}
		if e.ObjectRef.Resource == "events" {
			var ev auditEvent
			if json.Unmarshal(e.RequestObject, &ev) == nil && ev.Reason == "FailedScheduling" {
				a.unsched[ev.Regarding.Name] = true
			}
		}
		if !ours(e.UserAgent) {
			continue
		}
		key := e.Verb + " " + e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			key += "/" + e.ObjectRef.Subresource
		}
		if key == "create pods" && a.jobPod == nil && len(e.RequestObject) > 0 {
			a.jobPod = slices.Clone(e.RequestObject)
		}
		a.counts[key]++
	}
	return sc.Err()
}

// printKubeBurst prints r as a table; nothing when r is nil.
func printKubeBurst(w io.Writer, r *KubeBurstResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nkube burst: %d runs at once, one kube runner --capacity %d, job pods cpu %s memory %s (namespace %s)\n",
		r.Runs, r.Runs, r.CPUs, r.Memory, r.Namespace)
	fmt.Fprintf(w, "  step clock: %s\n", r.StepClock)
	for _, ph := range []*BurstPhase{r.Cold, r.Warm} {
		if ph == nil {
			continue
		}
		fmt.Fprintf(w, "  warm pods %d: %d succeeded, %d not, %d logs whole; queued → first step p50 %.0f ms, p99 %.0f ms (min %.0f, max %.0f); last first step %.1f s; push → all final %.1f s\n",
			ph.WarmPods, ph.Succeeded, ph.Lost, ph.WholeLogs, ph.FirstStep.P50, ph.FirstStep.P99, ph.FirstStep.Min, ph.FirstStep.Max, ph.LastStartS, ph.WallS)
		fmt.Fprintf(w, "    took a warm pod %d; pod created → Running p50 %.0f ms, p99 %.0f ms; agent delivered and connected p50 %.0f ms, p99 %.0f ms\n",
			ph.TookWarm, ph.PodRunning.P50, ph.PodRunning.P99, ph.AgentConnected.P50, ph.AgentConnected.P99)
		fmt.Fprintf(w, "    runner: peak RSS %.0f MiB, CPU %.1f s (%.0f %% of one core); pods first unschedulable: %d\n",
			mib(ph.RunnerPeakRSS), ph.RunnerCPUSeconds, ph.RunnerCPUPercent, ph.Unschedulable)
		fmt.Fprintf(w, "    API requests per run (audit log): %s\n", requestsLine(ph.Requests))
	}
	printFloor(w, r)
}

// requestsLine is a per-run (or per-pod) request count as "total: verb
// resource n, ...", by key.
func requestsLine(req map[string]float64) string {
	keys := make([]string, 0, len(req))
	total := 0.0
	for k, v := range req {
		keys = append(keys, k)
		total += v
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, req[k])
	}
	return fmt.Sprintf("%.2f: %s", total, strings.Join(parts, ", "))
}
