package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/svcauth"
	"knotless.dev/knotless/internal/testwait"
)

// Attacks on the HTTP server by clients that hold connections without
// finishing what they started: headers, bodies, reading answers. Each
// test checks that a new, honest client is still answered within a
// second while the attack runs, and that what the attacker holds is
// bounded.

// dialFrom opens a TCP connection to the fixture's server from the
// loopback address src ("" for the default, 127.0.0.1). Every 127.x.y.z
// is the local host on Linux: distinct addresses are distinct clients.
func dialFrom(t *testing.T, f *fixture, src string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", f.Addr)
	if err != nil {
		t.Fatalf("dial from %q: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientFrom is alice's client on fresh connections from src.
func clientFrom(f *fixture, src string) *api.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c := f.alice()
	c.HTTP = &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	return c
}

// answeredWithinASecond checks that a new client from src gets a query
// that reads the database answered within a second.
func answeredWithinASecond(t *testing.T, f *fixture, src string) {
	t.Helper()
	start := time.Now()
	var out api.Account
	err := clientFrom(f, src).Query(context.Background(), api.MethodWhoAmI, nil, &out)
	if took := time.Since(start); err != nil || took > time.Second {
		t.Errorf("whoami from %s during the attack: %v after %s; want an answer within 1s", orDefault(src), err, took.Round(time.Millisecond))
	}
}

func orDefault(src string) string {
	if src == "" {
		return "127.0.0.1"
	}
	return src
}

// closedWithin reports whether the server closes c (reading what it
// still sends) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// closeWatch counts the connections the server closed: one goroutine per
// connection reads until it ends.
type closeWatch struct{ closed atomic.Int64 }

func (w *closeWatch) watch(c net.Conn) {
	go func() {
		io.Copy(io.Discard, c)
		w.closed.Add(1)
	}()
}

// readStatus reads the status line of an answer on c within d.
func readStatus(t *testing.T, c net.Conn, d time.Duration) (int, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read answer within %s: %v", d, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func TestLimits_1563StalledHeadersNeitherCrowdOutAClientNorPileUp(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1563 connections")
	}
	f := newFixture(t, servertest.Options{})
	const n = 1563
	var w closeWatch
	pad := strings.Repeat("a", 8<<10)
	for range n {
		c := dialFrom(t, f, "")
		// The start of a 1 MiB header that never ends.
		fmt.Fprintf(c, "GET /xrpc/%s HTTP/1.1\r\nHost: x\r\nX-Pad: %s", api.MethodDescribeServer, pad)
		w.watch(c)
	}
	// The honest client shares the attacker's address: it gets in by
	// pushing out the header that has stalled longest.
	answeredWithinASecond(t, f, "")
	answeredWithinASecond(t, f, "127.0.0.2")
	// The server holds at most its per-address limit of them.
	testwait.For(t, 10*time.Second, "the server to close the stalled headers past its per-address limit", func() bool {
		return w.closed.Load() >= n-server.DefaultMaxConnsPerClient
	})
	answeredWithinASecond(t, f, "")
}

func TestLimits_HeaderPastMaxHeaderBytesIsRefused431(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	c := dialFrom(t, f, "")
	fmt.Fprintf(c, "GET /xrpc/%s HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", api.MethodDescribeServer,
		strings.Repeat("a", server.DefaultMaxHeaderBytes+8<<10))
	if status, _ := readStatus(t, c, 5*time.Second); status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status = %d, want 431", status)
	}
}

func TestLimits_StalledHeaderAndIdleKeepAliveAreClosed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Limits: server.Limits{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}})
	stalled := dialFrom(t, f, "")
	fmt.Fprintf(stalled, "GET /xrpc/%s HTTP/1.1\r\nHost: x\r\n", api.MethodDescribeServer)
	idle := dialFrom(t, f, "")
	fmt.Fprintf(idle, "GET /xrpc/%s HTTP/1.1\r\nHost: x\r\n\r\n", api.MethodDescribeServer)
	if status, _ := readStatus(t, idle, 5*time.Second); status != http.StatusOK {
		t.Fatalf("describe: status %d", status)
	}
	if !closedWithin(stalled, 3*time.Second) {
		t.Error("a header stalled past HeaderTimeout: connection still open after 3s")
	}
	if !closedWithin(idle, 3*time.Second) {
		t.Error("a keep-alive connection idle past IdleTimeout: still open after 3s")
	}
}

func TestLimits_WaitingConnectionsMakeRoomForANewClient(t *testing.T) {
	t.Parallel()
	const perClient, total = 20, 30
	f := newFixture(t, servertest.Options{Limits: server.Limits{MaxConnsPerClient: perClient, MaxConns: total}})
	var w closeWatch
	// 25 connections that never send anything from one address, 25 idle
	// keep-alives from another.
	for range 25 {
		w.watch(dialFrom(t, f, "127.0.0.2"))
	}
	for i := range 25 {
		if i == perClient {
			// A keep-alive is closed to make room once idle for
			// KeepAliveGrace (its client's next request would race it).
			time.Sleep(server.KeepAliveGrace)
		}
		c := dialFrom(t, f, "127.0.0.3")
		fmt.Fprintf(c, "GET /xrpc/%s HTTP/1.1\r\nHost: x\r\n\r\n", api.MethodDescribeServer)
		if status, _ := readStatus(t, c, 5*time.Second); status != http.StatusOK {
			t.Fatalf("describe: status %d", status)
		}
		w.watch(c)
	}
	answeredWithinASecond(t, f, "127.0.0.2")
	answeredWithinASecond(t, f, "127.0.0.3")
	answeredWithinASecond(t, f, "127.0.0.4")
	testwait.For(t, 5*time.Second, "the server to hold at most its limits", func() bool {
		return w.closed.Load() >= 50-total
	})
}

// longPoll keeps a getLog of a step of run id that waits up to 60 s going
// from src until ctx ends (a poll whose connection was closed while it
// waited for its header to be read starts again).
func longPoll(ctx context.Context, f *fixture, src string, id int64) {
	go func() {
		for ctx.Err() == nil {
			resp, err := clientFrom(f, src).Do(ctx, http.MethodGet, api.MethodGetRunLog,
				url.Values{"run": {itoa(id)}, "step": {"0"}, "wait": {"60"}}, "", nil)
			if err == nil {
				resp.Body.Close()
			}
		}
	}()
}

func TestLimits_PerClientLimitRefusesPastRequestsInFlightOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Limits: server.Limits{MaxConnsPerClient: 3}})
	run := queueOne(t, f, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		longPoll(ctx, f, "127.0.0.2", run.ID)
	}
	// Once the three polls are inside their requests, a fourth connection
	// from their address is refused at once.
	testwait.For(t, 10*time.Second, "a fourth connection from 127.0.0.2 to be refused", func() bool {
		c := dialFrom(t, f, "127.0.0.2")
		defer c.Close()
		fmt.Fprintf(c, "GET /xrpc/%s HTTP/1.1\r\nHost: x\r\n\r\n", api.MethodDescribeServer)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false // refused before the answer could be read: try again
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	answeredWithinASecond(t, f, "127.0.0.3")
	cancel()
	testwait.For(t, 5*time.Second, "127.0.0.2 to be served again after its polls ended", func() bool {
		var out api.Account
		return clientFrom(f, "127.0.0.2").Query(context.Background(), api.MethodWhoAmI, nil, &out) == nil
	})
}

// openFiles counts this process's descriptors open on path.
func openFiles(t *testing.T, path string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if p, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && p == path {
			n++
		}
	}
	return n
}

func TestLimits_ReaderThatNeverReadsIsHungUpOnAndTheLogClosed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Limits: server.Limits{WriteStall: time.Second}})
	run := queueOne(t, f, "")
	// A 256 MiB log (sparse): far more than socket buffers hold.
	logPath := filepath.Join(f.DataDir, server.LogsDir, itoa(run.ID), "0.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(logPath, 256<<20); err != nil {
		t.Fatal(err)
	}
	c := dialFrom(t, f, "")
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(c, "GET /xrpc/%s?run=%d&step=0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
		api.MethodGetRunLog, run.ID, f.token)
	testwait.For(t, 5*time.Second, "the server to open the log", func() bool { return openFiles(t, logPath) > 0 })
	answeredWithinASecond(t, f, "")
	testwait.For(t, 10*time.Second, "the server to give up on the reader and close the log", func() bool {
		return openFiles(t, logPath) == 0
	})
}

// rawRequest sends a request header announcing a body of length bytes and
// the first part of that body, and no more.
func rawRequest(c net.Conn, method, target string, header map[string]string, length int, first string) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n", method, target, length)
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n" + first)
	io.WriteString(c, b.String())
}

func TestLimits_BodyOfAnUnauthenticatedRequestIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	forger, _ := svcauth.GenerateKey()
	victim := f.RegisterRunner(t, f.repo, "r1", nil, true)
	forged := func(nsid string) string {
		s := &svcauth.Signer{DID: victim.DID, Audience: f.DID(), Key: forger}
		tok, err := s.Token(nsid)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	basic := func(pass string) string {
		req, _ := http.NewRequest("GET", "/", nil)
		req.SetBasicAuth("x", pass)
		return req.Header.Get("Authorization")
	}
	for _, tc := range []struct {
		name, target string
		header       map[string]string
		want         int
		length       int // default 8 MiB: more than net/http would read after the handler
	}{
		{"appendLog without token", "/xrpc/" + api.MethodAppendLog + "?run=1&step=0&offset=0", nil, 401, 0},
		{"appendLog forged token", "/xrpc/" + api.MethodAppendLog + "?run=1&step=0&offset=0",
			map[string]string{"Authorization": forged(api.MethodAppendLog)}, 401, 0},
		{"register forged token", "/xrpc/" + api.MethodRegisterRunner,
			map[string]string{"Authorization": forged(api.MethodRegisterRunner)}, 401, 0},
		{"createRepo bad token", "/xrpc/" + api.MethodCreateRepo,
			map[string]string{"Authorization": "Bearer knl_nope"}, 401, 0},
		{"git push without password", "/" + f.repo + ".git/git-receive-pack", nil, 401, 0},
		{"git push bad password", "/" + f.repo + ".git/git-receive-pack",
			map[string]string{"Authorization": basic("knl_nope")}, 401, 0},
		// A body net/http would read the rest of to reuse the connection.
		{"createRepo bad token, small body", "/xrpc/" + api.MethodCreateRepo,
			map[string]string{"Authorization": "Bearer knl_nope"}, 401, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialFrom(t, f, "")
			start := time.Now()
			length := tc.length
			if length == 0 {
				length = 8 << 20
			}
			rawRequest(c, http.MethodPost, tc.target, tc.header, length, strings.Repeat("x", 100))
			if status, body := readStatus(t, c, time.Second); status != tc.want {
				t.Errorf("status = %d %q, want %d", status, body, tc.want)
			}
			answeredWithinASecond(t, f, "")
			if !closedWithin(c, 2*time.Second) {
				t.Error("connection still open 2s after the refusal: the server waits for the body")
			}
			t.Logf("refused and closed after %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

func TestLimits_SlowBodyOfAValidTokenTimesOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Limits: server.Limits{BodyStall: 500 * time.Millisecond, BodyMinRate: 4 << 10}})
	// Anyone can make a key and sign a valid registration token with it.
	key, _ := svcauth.GenerateKey()
	did, _ := svcauth.DIDKey(key)
	signer := &svcauth.Signer{DID: did, Audience: f.DID(), Key: key}
	auth := func() map[string]string {
		tok, err := signer.Token(api.MethodRegisterRunner)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json",
			api.RegistrationTokenHeader: f.AdminToken}
	}
	// Padded with white space (valid JSON) to a size worth pausing in.
	body := fmt.Sprintf(`{"repo":%q,"name":"slow","labels":["l"]%s}`, f.repo, strings.Repeat(" ", 800))

	t.Run("stalled", func(t *testing.T) {
		c := dialFrom(t, f, "")
		rawRequest(c, http.MethodPost, "/xrpc/"+api.MethodRegisterRunner, auth(), len(body), body[:10])
		answeredWithinASecond(t, f, "")
		if status, msg := readStatus(t, c, 3*time.Second); status != http.StatusRequestTimeout {
			t.Errorf("stalled body: status %d %q, want 408", status, msg)
		}
	})
	t.Run("trickled", func(t *testing.T) {
		c := dialFrom(t, f, "")
		rawRequest(c, http.MethodPost, "/xrpc/"+api.MethodRegisterRunner, auth(), len(body), body[:1])
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // a byte every 100 ms: never stalls, far below 4 KiB/s
			defer wg.Done()
			for i := 1; i < len(body); i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := io.WriteString(c, body[i:i+1]); err != nil {
					return
				}
			}
		}()
		defer func() { close(stop); wg.Wait() }()
		if status, msg := readStatus(t, c, 3*time.Second); status != http.StatusRequestTimeout {
			t.Errorf("trickled body: status %d %q, want 408", status, msg)
		}
	})
	t.Run("paused less than BodyStall", func(t *testing.T) {
		c := dialFrom(t, f, "")
		rawRequest(c, http.MethodPost, "/xrpc/"+api.MethodRegisterRunner, auth(), len(body), body[:10])
		time.Sleep(300 * time.Millisecond) // a pause the limits allow
		io.WriteString(c, body[10:])
		if status, msg := readStatus(t, c, 3*time.Second); status != http.StatusOK {
			t.Errorf("body with a short pause: status %d %q, want 200", status, msg)
		}
	})
}

func TestLimits_LongPollAfterABodyOutlivesTheBodyDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Limits: server.Limits{BodyStall: 200 * time.Millisecond}})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	start := time.Now()
	var out api.ClaimOutput
	if err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: 2}, &out); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond || out.Run != nil {
		t.Fatalf("claim waiting 2s: answered after %s with %+v; want after ~2s with no run", took, out.Run)
	}
}

// Before, past --max-conns a new connection waited unanswered in the
// listen queue while every connection held a long poll: a runner's next
// claim hung until its own timeout, told nothing. It is answered at once
// now: 503, Retry-After, and the limit's name, which knotless-run logs and
// backs off from.
func TestLimits_ARunnerPastMaxConnsIsToldAtOnceWith503NamingTheLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Limits: server.Limits{MaxConns: 3}})
	run := queueOne(t, f, "runners: [elsewhere]\n")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	r.Client.HTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		longPoll(ctx, f, "127.0.0.2", run.ID)
	}
	var last error
	var took time.Duration
	ok := false
	deadline := time.Now().Add(15 * time.Second)
	for !ok && time.Now().Before(deadline) {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		var out api.ClaimOutput
		last = r.Client.Procedure(cctx, api.MethodClaim, api.ClaimInput{Wait: 0}, &out)
		took = time.Since(start)
		ccancel()
		var e *api.Error
		ok = errors.As(last, &e) && e.Status == http.StatusServiceUnavailable &&
			strings.Contains(e.Message, "--max-conns)") && took < time.Second
		time.Sleep(50 * time.Millisecond)
	}
	if !ok {
		t.Fatalf("claim while 3 long polls hold --max-conns 3: %v after %s; want 503 naming --max-conns within a second", last, took.Round(time.Millisecond))
	}
	cancel()
}
