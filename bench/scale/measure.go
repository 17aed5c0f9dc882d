package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// auditEvent is what the benchmark reads of an audit log line
// (audit.k8s.io/v1 Event).
type auditEvent struct {
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	Verb      string `json:"verb"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// requests counts the audit log's requests by user in [from, to), by
// "verb resource[/subresource]", and returns the pod creates' times.
func requests(path, user string, from, to time.Time) (map[string]int, []time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	counts := map[string]int{}
	var creates []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.User.Username != user || e.Received.Before(from) || !e.Received.Before(to) {
			continue
		}
		what := e.Verb
		if e.ObjectRef != nil {
			what += " " + e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				what += "/" + e.ObjectRef.Subresource
			}
		}
		counts[what]++
		if what == "create pods" {
			creates = append(creates, e.Received)
		}
	}
	return counts, creates, sc.Err()
}

// total is the sum of counts.
func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// perRun renders counts divided by runs, largest first.
func perRun(counts map[string]int, runs int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return counts[b] - counts[a] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(counts[k])/float64(runs)))
	}
	return strings.Join(parts, ", ")
}

// createRate returns pod creates per second over the span of creates, and
// the most in any one second.
func createRate(creates []time.Time) (avg float64, peak int) {
	if len(creates) < 2 {
		return 0, len(creates)
	}
	slices.SortFunc(creates, func(a, b time.Time) int { return a.Compare(b) })
	span := creates[len(creates)-1].Sub(creates[0]).Seconds()
	buckets := map[int64]int{}
	for _, t := range creates {
		buckets[t.Unix()]++
		peak = max(peak, buckets[t.Unix()])
	}
	return float64(len(creates)-1) / span, peak
}

// percentile returns the p-th percentile (0-100, nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// deliveries reads, from the server's stored setup logs (DATA/logs/RUN/0.log)
// of runs, the kube executor's "step agent ... delivered (N MB) and
// connected in D" line: the agent's delivery over the first exec, through
// the API server and kwok's server to the pod.
func deliveries(data string, runs []int64) []time.Duration {
	var ds []time.Duration
	for _, id := range runs {
		b, err := os.ReadFile(filepath.Join(data, "logs", strconv.FormatInt(id, 10), "0.log"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			_, after, ok := strings.Cut(l, ") and connected in ")
			if !ok || !strings.Contains(l, "step agent") {
				continue
			}
			f, _, _ := strings.Cut(after, ";")
			if d, err := time.ParseDuration(f); err == nil {
				ds = append(ds, d)
			}
		}
	}
	return ds
}

// rssKB returns VmRSS of pid in KiB (/proc/PID/status).
func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}
