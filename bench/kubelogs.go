package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/bench/kubelogsline"
	"knotless.dev/knotless/internal/api"
)

// kubeLogsName is the name -only takes for the kube log streams benchmark.
// It is not in the default list: it needs the local cluster (make
// cluster-up).
const kubeLogsName = "kubelogs"

// kubeLogsConfig is what the kubelogs flags ask for.
type kubeLogsConfig struct {
	streams       int
	mbps, seconds float64
	cpus, memory  string
	image         string
	paths         string
	tick          time.Duration
}

// kubeLogsFlags are the kubelogs benchmark's flags, registered before main
// parses them.
var kubeLogsFlags = func() *kubeLogsConfig {
	k := &kubeLogsConfig{}
	flag.IntVar(&k.streams, "kube-log-streams", 10, "kubelogs benchmark: streams at once (runs of one kube runner with --capacity of as many; pods for the bare paths)")
	flag.Float64Var(&k.mbps, "kube-log-mbps", 1, "kubelogs benchmark: megabytes (10^6 bytes) a second each stream writes")
	flag.Float64Var(&k.seconds, "kube-log-seconds", 20, "kubelogs benchmark: seconds each stream writes")
	flag.StringVar(&k.cpus, "kube-log-cpus", "15m", "kubelogs benchmark: each job pod's CPU (--cpus; requests = limits); the bare paths' pods request as much and have no limit")
	flag.StringVar(&k.memory, "kube-log-memory", "64Mi", "kubelogs benchmark: each pod's memory")
	flag.StringVar(&k.image, "kube-log-image", "localhost/knotless/job-base:1", "kubelogs benchmark: the pods' image (busybox is enough: the writer is a static program the benchmark builds)")
	flag.StringVar(&k.paths, "kube-log-paths", "knotless", "kubelogs benchmark: the paths measured, comma-separated, in order: knotless (runs of a kube runner: step agent, pods/exec, runner, server), exec (a bare pods/exec of the writer, read by this program), dial (the writer dialling a TCP listener of this program over the pod network), shell (runs of a shell runner on this machine: the runner and server without Kubernetes)")
	flag.DurationVar(&k.tick, "kube-log-tick", 20*time.Millisecond, "kubelogs benchmark: how often each writer writes the lines due (one write each time)")
	return k
}()

// KubeLogsResult holds the figures of the kube log streams benchmark:
// Streams writers at once, each writing MBps for Seconds, over each path.
type KubeLogsResult struct {
	Streams   int     `json:"streams"`
	MBps      float64 `json:"mbPerSecondEach"`
	Seconds   float64 `json:"seconds"`
	Tick      string  `json:"writeEvery"`
	CPUs      string  `json:"cpus"`
	Memory    string  `json:"memory"`
	Namespace string  `json:"namespace"`
	// Lines says what is written and how its delay is read.
	Lines string      `json:"lines"`
	Paths []*LogsPath `json:"paths"`
}

// LogsPath is one path's figures. The window is the writers' common start
// to start + Seconds: the cost of the streams in steady state.
type LogsPath struct {
	Path string `json:"path"`
	// Delay is, for every line, when it was seen (knotless: the line time
	// the server stored, i.e. when the runner read it, ms; bare paths:
	// when this program read it) minus the clock the writer put in it.
	Delay Spread `json:"lineDelay"`
	// Drain is, per stream, the delay of its last line: how far behind
	// the path was when the writer stopped.
	Drain Spread `json:"lastLineDelay"`
	// Written and Delivered are bytes of numbered lines, all streams.
	Written   int64 `json:"bytesWritten"`
	Delivered int64 `json:"bytesDelivered"`
	// Whole is how many streams arrived with every line, in order, each
	// byte as written, and the writer's summary; Lost the lines missing,
	// Bad the lines out of order or not as written.
	Whole int   `json:"wholeStreams"`
	Lost  int64 `json:"linesLost"`
	Bad   int64 `json:"linesBad"`
	// Late is how many writers started after the common start (their pod
	// came up past the barrier's wait).
	Late int `json:"latecomers"`
	// WriterMBps is each writer's achieved rate (its bytes over its first
	// to last write), WriterLateMs the most any write started behind its
	// schedule: the step's own pace held back.
	WriterMBps   SpreadF `json:"writerMbPerSecond"`
	WriterLateMs float64 `json:"writerMaxLateMs"`
	// Costs are the processes' CPU (cores, over the window) and peak RSS.
	Costs []ProcCost `json:"costs"`
	// BusyCores is the machine's CPU in use over the window (/proc/stat,
	// all processes), out of runtime.NumCPU.
	BusyCores float64 `json:"machineBusyCores"`
	// RunFinal is, per run (knotless only), the writer's last write to
	// the run recorded final: the whole log shipped to the server.
	RunFinal Spread `json:"lastWriteToRunFinal,omitempty"`
	// LineTimesPerSecond is, per run (knotless, shell), the line time
	// records the server stored over the writer's seconds: how many
	// pieces a second the runner read from the step (one record per
	// read that began a line in a new millisecond).
	LineTimesPerSecond SpreadF  `json:"lineTimesPerStreamSecond,omitempty"`
	Problems           []string `json:"problems,omitempty"`
}

// SpreadF is a set of values: nearest-rank percentiles.
type SpreadF struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

func spreadF(v []float64) SpreadF {
	if len(v) == 0 {
		return SpreadF{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return SpreadF{N: len(s), P50: s[max(0, (len(s)*50+99)/100-1)], Min: s[0], Max: s[len(s)-1]}
}

// ProcCost is one component's CPU and memory over a window.
type ProcCost struct {
	Name    string  `json:"name"`
	Procs   int     `json:"processes"`
	Cores   float64 `json:"cores"`
	PeakRSS int64   `json:"peakRssBytes"` // the highest sum over its processes, sampled every 250 ms
	// MsPerMB is its CPU time from the start until the path delivered
	// every byte, in ms per megabyte delivered.
	MsPerMB float64 `json:"cpuMsPerMB"`
}

// benchKubeLogs runs the kube log streams benchmark on the local cluster
// (test/cluster) over each path k.paths names. It fails when a stream lost
// or changed a line.
func benchKubeLogs(ctx context.Context, bin string, k *kubeLogsConfig) (*KubeLogsResult, error) {
	if k.streams < 1 || k.mbps <= 0 || k.seconds <= 0 || k.tick < time.Millisecond {
		return nil, errors.New("-kube-log-streams must be at least 1, -kube-log-mbps and -kube-log-seconds above 0, -kube-log-tick at least 1ms")
	}
	paths := strings.Split(k.paths, ",")
	for _, p := range paths {
		if !slices.Contains([]string{"knotless", "exec", "dial", "shell"}, p) {
			return nil, fmt.Errorf("-kube-log-paths: unknown path %q (want knotless, exec, dial, shell)", p)
		}
	}
	// The shell path alone needs no cluster.
	var kc *localCluster
	host := "127.0.0.1"
	if slices.ContainsFunc(paths, func(p string) bool { return p != "shell" }) {
		var err error
		if kc, err = loadLocalCluster(ctx); err != nil {
			return nil, fmt.Errorf("the local cluster (make cluster-up): %w", err)
		}
		if host, err = podReachableHost(ctx, kc); err != nil {
			return nil, err
		}
	}
	writer, err := buildLogsWriter(ctx)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(filepath.Dir(writer))
	res := &KubeLogsResult{Streams: k.streams, MBps: k.mbps, Seconds: k.seconds, Tick: k.tick.String(), CPUs: k.cpus, Memory: k.memory,
		Lines: fmt.Sprintf("%d-byte numbered lines, each with the writer's clock (Unix ns; the node is this machine) and a payload of random base64 (zstd, which the step agent applies to each frame, shrinks a line to about 0.55 of its size), written every %s; a stream waits at a barrier so that all start together", kubelogsline.Len, k.tick)}
	var errs []error
	for _, p := range paths {
		wkc := kc
		if p == "shell" {
			wkc = nil
		}
		lw, err := newLogsWorld(ctx, wkc, k, writer, host)
		if err != nil {
			return res, err
		}
		res.Namespace = lw.ns
		var lp *LogsPath
		switch p {
		case "knotless", "shell":
			lp, err = lw.knotless(ctx, bin, p)
		case "exec", "dial":
			lp, err = lw.bare(ctx, p)
		}
		lw.close()
		if lp != nil {
			res.Paths = append(res.Paths, lp)
			progress("kubelogs %s: %d streams × %.1f MB/s: %d whole, %d lines lost, %d bad; delay p50 %.0f ms p99 %.0f ms max %.0f ms; machine %.2f cores busy",
				p, k.streams, k.mbps, lp.Whole, lp.Lost, lp.Bad, lp.Delay.P50, lp.Delay.P99, lp.Delay.Max, lp.BusyCores)
		}
		if err != nil {
			return res, fmt.Errorf("%s path: %w", p, err)
		}
		if lp.Whole != k.streams || lp.Lost != 0 || lp.Bad != 0 {
			errs = append(errs, fmt.Errorf("%s path: %d of %d streams whole, %d lines lost, %d bad: %s",
				p, lp.Whole, k.streams, lp.Lost, lp.Bad, strings.Join(lp.Problems, "; ")))
		}
	}
	return res, errors.Join(errs...)
}

// buildLogsWriter builds bench/kubelogswriter static into a temporary
// directory and returns its path.
func buildLogsWriter(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "knotless-kubelogs.")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "kubelogswriter")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./bench/kubelogswriter")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("build the writer (go run ./bench from the repository's root): %w\n%s", err, b)
	}
	return out, nil
}

// podReachableHost is an address of this machine that the local cluster's
// pods reach: the pod network bridge's (the node is this machine).
func podReachableHost(ctx context.Context, kc *localCluster) (string, error) {
	if ifc, err := net.InterfaceByName("cni0"); err == nil {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				return ip.IP.String(), nil
			}
		}
	}
	nodes, err := kc.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("no cni0 (the local cluster's pod bridge), and the nodes: %w", err)
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil {
				return a.Address, nil
			}
		}
	}
	return "", errors.New("no IPv4 address on cni0 (the local cluster's pod bridge) nor a node's InternalIP")
}

// barrier makes writers start together: each dials it and sends its name;
// once all have (or the wait ends) each gets the same start time, and a
// writer that comes later gets one at once.
type barrier struct {
	ln      net.Listener
	mu      sync.Mutex
	waiting []net.Conn
	names   map[string]bool
	start   time.Time // zero until released
	late    int
	arrived chan struct{} // gets a value per arrival
}

func newBarrier(host string) (*barrier, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	b := &barrier{ln: ln, names: map[string]bool{}, arrived: make(chan struct{}, 100000)}
	go b.serve()
	return b, nil
}

func (b *barrier) addr() string { return b.ln.Addr().String() }

func (b *barrier) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			name, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				c.Close()
				return
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			b.names[strings.TrimSpace(name)] = true
			if !b.start.IsZero() {
				b.late++
				fmt.Fprintf(c, "start %d\n", max(b.start.UnixNano(), time.Now().UnixNano()))
				c.Close()
				return
			}
			b.waiting = append(b.waiting, c)
			b.arrived <- struct{}{}
		}()
	}
}

// release waits until n writers arrived or timeout, and starts them all
// lead from now; it returns the start and how many had arrived.
func (b *barrier) release(ctx context.Context, n int, timeout time.Duration, lead time.Duration) (time.Time, int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	got := 0
wait:
	for got < n {
		select {
		case <-b.arrived:
			got++
		case <-t.C:
			break wait
		case <-ctx.Done():
			return time.Time{}, got, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.start = time.Now().Add(lead)
	for _, c := range b.waiting {
		fmt.Fprintf(c, "start %d\n", b.start.UnixNano())
		c.Close()
	}
	b.waiting = nil
	return b.start, got, nil
}

func (b *barrier) latecomers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.late
}

func (b *barrier) close() {
	b.ln.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.waiting {
		c.Close()
	}
}

// lineStream checks one stream of numbered lines as it arrives, in pieces
// each stamped with when it was seen: a line's time is its first byte's.
type lineStream struct {
	h        *delayHist
	partial  []byte
	partialT int64 // when the partial line's first byte was seen (ns)
	next     int64 // the line number due
	lines    int64
	bytes    int64 // of numbered lines
	lost     int64
	bad      int64
	problems []string
	lastD    time.Duration // the last line's delay
	// the writer's summary
	end                        bool
	endLines, endBytes         int64
	firstNS, lastNS, maxLateUS int64
}

// feed takes p, seen at tns (Unix ns).
func (s *lineStream) feed(p []byte, tns int64) {
	for len(p) > 0 {
		if len(s.partial) == 0 {
			s.partialT = tns
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.partial = append(s.partial, p...)
			return
		}
		var l []byte
		if len(s.partial) > 0 {
			s.partial = append(s.partial, p[:i]...)
			l = s.partial
		} else {
			l = p[:i]
		}
		s.line(l, s.partialT)
		s.partial = s.partial[:0]
		p = p[i+1:]
	}
}

func (s *lineStream) problem(f string, a ...any) {
	if len(s.problems) < 3 {
		s.problems = append(s.problems, fmt.Sprintf(f, a...))
	}
}

func (s *lineStream) line(l []byte, tns int64) {
	if rest, ok := bytes.CutPrefix(l, []byte("end ")); ok {
		f := strings.Fields(string(rest))
		var v [5]int64
		for i := range v {
			if i < len(f) {
				v[i], _ = strconv.ParseInt(f[i], 10, 64)
			}
		}
		s.end = len(f) == 5
		s.endLines, s.endBytes, s.firstNS, s.lastNS, s.maxLateUS = v[0], v[1], v[2], v[3], v[4]
		return
	}
	seq, ns, err := kubelogsline.Parse(l)
	if err != nil {
		s.bad++
		s.problem("%v", err)
		return
	}
	switch {
	case seq > s.next:
		s.lost += seq - s.next
		s.problem("lines %d-%d missing", s.next, seq-1)
	case seq < s.next:
		s.bad++
		s.problem("line %d after line %d", seq, s.next-1)
	}
	s.next = max(s.next, seq+1)
	s.lines++
	s.bytes += int64(len(l)) + 1
	s.lastD = time.Duration(tns - ns)
	s.h.add(s.lastD)
}

// finish ends the stream: a partial last line or lines missing at the end
// (against the writer's summary, or want when there is none) are lost.
func (s *lineStream) finish(want int64) {
	if len(s.partial) > 0 {
		s.bad++
		s.problem("a last line cut short (%d bytes)", len(s.partial))
	}
	if s.end {
		want = s.endLines
	} else {
		s.problem("no summary line from the writer")
	}
	if s.next < want {
		s.lost += want - s.next
		s.problem("lines %d-%d missing at the end", s.next, want-1)
	}
}

func (s *lineStream) whole(want int64) bool {
	return s.end && s.endLines == want && s.lines == want && s.lost == 0 && s.bad == 0
}

// delayHist is a histogram of delays in 1 ms buckets (to 10 minutes; a
// negative delay, clocks read at different resolutions, counts as 0).
type delayHist struct {
	mu     sync.Mutex
	counts []int64
	n      int64
	max    time.Duration
}

func newDelayHist() *delayHist { return &delayHist{counts: make([]int64, 600_001)} }

func (h *delayHist) add(d time.Duration) {
	ms := min(max(int64(d/time.Millisecond), 0), int64(len(h.counts)-1))
	h.mu.Lock()
	h.counts[ms]++
	h.n++
	h.max = max(h.max, d)
	h.mu.Unlock()
}

func (h *delayHist) spread() Spread {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return Spread{}
	}
	rank := func(p int64) float64 {
		k := max((h.n*p+99)/100, 1)
		var c int64
		for i, v := range h.counts {
			if c += v; c >= k {
				return float64(i)
			}
		}
		return float64(len(h.counts) - 1)
	}
	minMS := 0.0
	for i, v := range h.counts {
		if v > 0 {
			minMS = float64(i)
			break
		}
	}
	return Spread{N: int(h.n), P50: rank(50), P99: rank(99), Min: minMS, Max: msf(h.max)}
}

// summarizeStreams fills lp's stream figures from the streams, each of
// which should have had want lines.
func summarizeStreams(lp *LogsPath, h *delayHist, streams []*lineStream, want int64) {
	var drains []time.Duration
	var rates []float64
	for i, s := range streams {
		s.finish(want)
		lp.Written += want * kubelogsline.Len
		lp.Delivered += s.bytes
		lp.Lost += s.lost
		lp.Bad += s.bad
		if s.whole(want) {
			lp.Whole++
		}
		for _, p := range s.problems {
			if len(lp.Problems) < 10 {
				lp.Problems = append(lp.Problems, fmt.Sprintf("stream %d: %s", i, p))
			}
		}
		if s.lines > 0 {
			drains = append(drains, s.lastD)
		}
		if s.end && s.lastNS > s.firstNS {
			// Its bytes over its first to last write (off by the last
			// write's bytes, 1/50 of a second's at the default tick).
			rates = append(rates, float64(s.endBytes)/float64(s.lastNS-s.firstNS)*1e3)
			lp.WriterLateMs = max(lp.WriterLateMs, float64(s.maxLateUS)/1e3)
		}
	}
	lp.Delay = h.spread()
	lp.Drain = spread(drains)
	lp.WriterMBps = spreadF(rates)
}

// logsWorld is one path's namespace, barrier and resource sampler.
type logsWorld struct {
	kc     *localCluster
	k      *kubeLogsConfig
	writer string // the writer's path on this machine
	host   string // this machine's address the pods reach
	ns     string
	bar    *barrier
}

// newLogsWorld makes a path's barrier and, on the cluster (kc not nil),
// its namespace.
func newLogsWorld(ctx context.Context, kc *localCluster, k *kubeLogsConfig, writer, host string) (*logsWorld, error) {
	w := &logsWorld{kc: kc, k: k, writer: writer, host: host}
	if kc != nil {
		var err error
		if w.ns, err = createBenchNamespace(ctx, kc, "klogs-"); err != nil {
			return nil, err
		}
	}
	b, err := newBarrier(host)
	if err != nil {
		w.close()
		return nil, err
	}
	w.bar = b
	return w, nil
}

func (w *logsWorld) close() {
	if w.bar != nil {
		w.bar.close()
	}
	if w.ns != "" {
		deleteNamespace(w.kc, w.ns)
	}
}

// lines is how many lines each writer writes.
func (w *logsWorld) lines() int64 {
	return int64(w.k.mbps * 1e6 * w.k.seconds / kubelogsline.Len)
}

// writerArgs are the writer's flags for stream id.
func (w *logsWorld) writerArgs(id int) []string {
	return []string{"-barrier", w.bar.addr(), "-id", strconv.Itoa(id),
		"-rate", strconv.FormatInt(int64(w.k.mbps*1e6), 10), "-seconds", strconv.FormatFloat(w.k.seconds, 'f', -1, 64),
		"-tick", w.k.tick.String()}
}

// startTimeout is how long the barrier waits for every writer: pods of a
// few millicores start slowly (docs/scaling.md: 100 pods of 10m, 2–4 min).
func (w *logsWorld) startTimeout() time.Duration {
	return 2*time.Minute + time.Duration(w.k.streams)*3*time.Second
}

// knotless measures the product's path: N runs of one kube runner, each
// step the writer (committed into the checkout, copied in with it); with
// path "shell", of one shell runner on this machine instead.
func (w *logsWorld) knotless(ctx context.Context, bin, path string) (*LogsPath, error) {
	c, err := startCluster(ctx, bin, "")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	n := w.k.streams
	sha, err := w.commitLogs(ctx, c)
	if err != nil {
		return nil, err
	}
	perStep := w.lines()*kubelogsline.Len + 1<<20
	disk := fmt.Sprintf("%dMi", max(64, 2*perStep>>20+16))
	flags := []string{"--capacity", strconv.Itoa(n), "--stop-wait", "30s", "--log-limit", fmt.Sprintf("%dMi", 2*perStep>>20+1)}
	if path == "knotless" {
		flags = append(flags, "--executor", "kube", "--kubeconfig", w.kc.Kubeconfig,
			"--namespace", w.ns, "--image", w.k.image, "--cpus", w.k.cpus, "--memory", w.k.memory, "--disk", disk)
	}
	if err := c.startRunner(ctx, "logs", flags...); err != nil {
		return nil, err
	}
	p := c.runner("logs")
	bw := burstWorld{c: c, kc: w.kc, ns: w.ns, n: n}
	defer bw.stopRunner(p)
	if err := c.waitRunnerPolling(ctx, "logs"); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTails())
	}
	if err := c.push(ctx); err != nil {
		return nil, err
	}
	lp := &LogsPath{Path: path}
	start, got, err := w.release(ctx, path, n)
	if err != nil {
		return nil, err
	}
	smp := newSampler(map[string]int{"knotless-run": p.cmd.Process.Pid, "knotless-server": c.server.cmd.Process.Pid})
	if err := smp.window(ctx, start, w.k.seconds); err != nil {
		return nil, err
	}
	runs, err := bw.waitAllFinal(ctx, sha)
	smp.tail()
	lp.Late = w.bar.latecomers() + n - got
	if err != nil {
		return lp, fmt.Errorf("%w\n%s", err, c.logTails())
	}
	h := newDelayHist()
	var streams []*lineStream
	var final []time.Duration
	var perSec []float64
	for _, r := range runs {
		s := &lineStream{h: h}
		streams = append(streams, s)
		if r.State != api.StateSucceeded {
			s.problem("run %d ended %s %s: %s", r.ID, r.State, r.Reason, r.Message)
		}
		nt, err := w.readRunLog(ctx, c, r.ID, s)
		if err != nil {
			return lp, err
		}
		perSec = append(perSec, float64(nt)/w.k.seconds)
		if r.FinishedAt != nil && s.end {
			final = append(final, r.FinishedAt.Sub(time.Unix(0, s.lastNS)))
		}
	}
	summarizeStreams(lp, h, streams, w.lines())
	lp.Costs, lp.BusyCores = smp.costs(float64(lp.Delivered) / 1e6)
	lp.RunFinal = spread(final)
	lp.LineTimesPerSecond = spreadF(perSec)
	return lp, nil
}

// commitLogs writes the n workflows, the writer beside them, commits and
// returns the commit's SHA.
func (w *logsWorld) commitLogs(ctx context.Context, c *cluster) (string, error) {
	dir := filepath.Join(c.git, ".knotless", "workflows")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := os.ReadFile(w.writer)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(c.git, "kubelogswriter"), b, 0o755); err != nil {
		return "", err
	}
	for i := range w.k.streams {
		wf := fmt.Sprintf(`name: logs-%03d
on:
  push:
    branches: ["**"]
runners: [bench]
timeout: 30m
steps:
  - name: write
    run: ./kubelogswriter %s
`, i, strings.Join(w.writerArgs(i), " "))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("logs-%03d.yml", i)), []byte(wf), 0o644); err != nil {
			return "", err
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "kubelogs"}} {
		if _, err := c.gitCmd(ctx, args...); err != nil {
			return "", err
		}
	}
	return c.gitCmd(ctx, "rev-parse", "HEAD")
}

// readRunLog feeds run's step 1 log, as the server serves it, into s, each
// piece stamped with the line time the server stored for it (read from
// the server's times file: DATA/logs/RUN/1.times, api.LineTime records,
// the runner's clock in ms when it read the line). It returns how many
// line times there were.
func (w *logsWorld) readRunLog(ctx context.Context, c *cluster, run int64, s *lineStream) (int, error) {
	times, err := api.ReadLineTimesFile(filepath.Join(c.dir, "server", "logs", strconv.FormatInt(run, 10), "1.times"), 0, 1<<62, 0, false)
	if err != nil {
		return 0, fmt.Errorf("read the line times of run %d: %w", run, err)
	}
	resp, err := c.admin.Do(ctx, http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {"1"}}, "", nil)
	if err != nil {
		return 0, fmt.Errorf("read log of run %d: %w", run, err)
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	buf := make([]byte, 1<<20)
	var off int64
	ti := 0
	tns := int64(0)
	for {
		// The piece up to the next line time's offset has the current one.
		for ti < len(times) && times[ti].Offset <= off {
			tns = times[ti].UnixMS * 1e6
			ti++
		}
		lim := int64(len(buf))
		if ti < len(times) {
			lim = min(lim, times[ti].Offset-off)
		}
		n, err := r.Read(buf[:lim])
		s.feed(buf[:n], tns)
		off += int64(n)
		if err == io.EOF {
			return len(times), nil
		}
		if err != nil {
			return len(times), fmt.Errorf("read log of run %d: %w", run, err)
		}
	}
}

// release starts path's n writers together (the barrier's release, half
// a second ahead) once all of them are at the barrier, or after
// startTimeout with those that are, which it says; it returns the common
// start and how many writers it started.
func (w *logsWorld) release(ctx context.Context, path string, n int) (time.Time, int, error) {
	start, got, err := w.bar.release(ctx, n, w.startTimeout(), 500*time.Millisecond)
	if err == nil && got < n {
		progress("kubelogs %s: %d of %d writers at the barrier after %s; started without the rest", path, got, n, w.startTimeout())
	}
	return start, got, err
}

// printKubeLogs prints r as a table; nothing when r is nil.
func printKubeLogs(w io.Writer, r *KubeLogsResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nkube log streams: %d streams at once, %.2f MB/s each for %.0f s; pods cpu %s memory %s\n",
		r.Streams, r.MBps, r.Seconds, r.CPUs, r.Memory)
	fmt.Fprintf(w, "  lines: %s\n", r.Lines)
	for _, p := range r.Paths {
		fmt.Fprintf(w, "  %s: %d/%d streams whole, %d lines lost, %d bad, %.1f of %.1f MB delivered; %d writers late to the start\n",
			p.Path, p.Whole, r.Streams, p.Lost, p.Bad, float64(p.Delivered)/1e6, float64(p.Written)/1e6, p.Late)
		fmt.Fprintf(w, "    line delay p50 %.0f ms, p99 %.0f ms, max %.0f ms; last line's delay per stream p50 %.0f ms, max %.0f ms\n",
			p.Delay.P50, p.Delay.P99, p.Delay.Max, p.Drain.P50, p.Drain.Max)
		fmt.Fprintf(w, "    writers: achieved %.3f MB/s p50 (min %.3f), most late %.0f ms",
			p.WriterMBps.P50, p.WriterMBps.Min, p.WriterLateMs)
		if p.RunFinal.N > 0 {
			fmt.Fprintf(w, "; last write → run final p50 %.0f ms, max %.0f ms; the runner's reads (line times) a second p50 %.0f",
				p.RunFinal.P50, p.RunFinal.Max, p.LineTimesPerSecond.P50)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "    machine: %.2f of %d cores busy;", p.BusyCores, runtime.NumCPU())
		for _, c := range p.Costs {
			fmt.Fprintf(w, " %s", c.Name)
			if c.Cores > 0 {
				fmt.Fprintf(w, " %.3f cores", c.Cores)
			}
			if c.PeakRSS > 0 {
				fmt.Fprintf(w, " %.0f MiB", mib(c.PeakRSS))
			}
			fmt.Fprintf(w, " %.1f ms/MB;", c.MsPerMB)
		}
		fmt.Fprintln(w)
		for _, pr := range p.Problems {
			fmt.Fprintf(w, "    problem: %s\n", pr)
		}
	}
}
