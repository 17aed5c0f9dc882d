package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// runnersPerAddress is how many of the idle benchmark's runners share one
// client address: under half of knotless-server's default
// --max-conns-per-client (512), so that the per-address cap, which guards
// against one host holding the server's connections, is not what the
// benchmark measures. Real runners come from their own hosts; a fleet
// behind one NAT address is the case the cap does hit, and docs/scaling.md
// says how it reads there.
const runnersPerAddress = 250

// idleAddresses returns the local address each group of runnersPerAddress
// runners dials from: 127.0.0.2, 127.0.0.3, ... (Linux routes all of
// 127.0.0.0/8 to the loopback interface), so that none shares 127.0.0.1
// with the benchmark's own admin calls. Where only 127.0.0.1 can be bound
// (macOS by default) it returns nil, and every runner dials from it.
func idleAddresses(n int) []net.IP {
	groups := (n + runnersPerAddress - 1) / runnersPerAddress
	if groups > 250 {
		groups = 250 // 127.0.0.2 .. 127.0.0.251; more runners per address past 62,500
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		progress("idle: cannot bind 127.0.0.2 (%v): every runner dials from 127.0.0.1, and past the server's --max-conns-per-client (512) they are refused", err)
		return nil
	}
	ln.Close()
	ips := make([]net.IP, groups)
	for i := range ips {
		ips[i] = net.IPv4(127, 0, 0, byte(2+i))
	}
	return ips
}

// idleConnTimeout is how long the runners' transports keep a connection
// with no request: Go's default, under knotless-server's keep-alive idle
// timeout (server.DefaultIdleTimeout, 2 minutes), so
// that a connection idle since its runner registered (registering 10,000
// takes about 2 minutes) is dropped by the client, not closed by the
// server as the runner's first poll goes out on it (that poll failed with
// EOF: 1,306 of 10,000 in one run).
const idleConnTimeout = 90 * time.Second

// idleTransports returns one HTTP transport per address of ips (one with
// no local address if ips is empty), each keeping a connection per runner
// that uses it.
func idleTransports(ips []net.IP, n int) []*http.Transport {
	if len(ips) == 0 {
		return []*http.Transport{{MaxIdleConnsPerHost: n + 8, IdleConnTimeout: idleConnTimeout}}
	}
	per := (n + len(ips) - 1) / len(ips)
	ts := make([]*http.Transport, len(ips))
	for i, ip := range ips {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 30 * time.Second}
		ts[i] = &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: per + 8, IdleConnTimeout: idleConnTimeout}
	}
	return ts
}

// scrapeMetric reads the value of the Prometheus sample name (no labels)
// from the server's /metrics.
func scrapeMetric(ctx context.Context, baseURL, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("GET /metrics: no sample %s", name)
}

// openFiles counts process pid's open file descriptors, and those open on
// the file db (SQLite opens the database file once per connection of its
// pool, besides one -wal and one -shm each).
func openFiles(pid int, db string) (total, onDB int, err error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == db {
			onDB++
		}
	}
	return len(ents), onDB, nil
}

// Latency describes durations in milliseconds, by nearest rank.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50Ms"`
	P99 float64 `json:"p99Ms"`
	Max float64 `json:"maxMs"`
}

func latency(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(ms)
	rank := func(p int) float64 { return ms[max(0, (len(ms)*p+99)/100-1)] }
	return Latency{N: len(ms), P50: rank(50), P99: rank(99), Max: ms[len(ms)-1]}
}
