package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
)

// countingLog is a slog handler that keeps the executor's messages, to
// count lost connections to the agent.
type countingLog struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newCountingLog() countingLog { return countingLog{mu: &sync.Mutex{}, msgs: &[]string{}} }

func (c countingLog) Enabled(context.Context, slog.Level) bool { return true }
func (c countingLog) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			msg += " (" + a.Value.String() + ")"
		}
		return true
	})
	c.mu.Lock()
	*c.msgs = append(*c.msgs, msg)
	c.mu.Unlock()
	return nil
}
func (c countingLog) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c countingLog) WithGroup(string) slog.Handler      { return c }

// count returns how many messages contain s, and them.
func (c countingLog) count(s string) (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var got []string
	for _, m := range *c.msgs {
		if strings.Contains(m, s) {
			got = append(got, m)
		}
	}
	return len(got), got
}

// TestKube_QuietStepOutlivesAProxyThatCutsIdleConnections pins
// actions/runner-container-hooks #331 (an idle stream cut fails a quiet
// step): behind a proxy that cuts connections idle for 5 s, a step silent
// for 12 s succeeds with its whole log, and the exec stream to the agent is
// never cut: the agent protocol's heartbeats keep it busy. The heartbeat
// is a fifth of the proxy's limit here (1 s against 5 s), as the default
// agent.DefaultHeartbeat (5 s) is of the idle timeouts load balancers
// commonly have (AWS ELB 60 s, GCP 30 s, nginx 60 s). A connection of the
// test's own that sends nothing is cut meanwhile: the proxy does cut idle
// connections, so the stream's survival is the heartbeats' doing.
func TestKube_QuietStepOutlivesAProxyThatCutsIdleConnections(t *testing.T) {
	const idle, heartbeat = 5 * time.Second, time.Second
	f := newFixture(t)
	px := newProxy(t, f.rest.Host, idle)
	cfg := f.config()
	cfg.Rest = px.config(f.rest)
	cfg.Heartbeat = heartbeat
	logs := newCountingLog()
	cfg.Logger = slog.New(logs)
	s := f.prepare(t, f.executor(t, cfg), f.spec(t, runID("idle")))
	// The positive control: a connection through the proxy that stays
	// silent (no TLS handshake even) is cut after idle.
	silent, err := net.Dial("tcp", px.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cut := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		_, _ = silent.Read(make([]byte, 1)) // returns when the proxy closes it
		cut <- time.Since(start)
	}()
	t0 := time.Now()
	res, out, err := runStep(t, s, "1", "echo start; sleep 12; echo done", 2*time.Minute)
	if err != nil || res.ExitCode != 0 || res.Reason != "" || string(out) != "start\ndone\n" {
		t.Fatalf("a step silent for 12 s behind a 5 s idle timeout: %+v %v %q", res, err, out)
	}
	lost, msgs := logs.count("connection to the step agent lost")
	t.Logf("step took %s; proxy: %d connections, %d cut for idleness; agent connections lost: %d %q",
		time.Since(t0).Round(time.Millisecond), px.accepted.Load(), px.idleCuts.Load(), lost, msgs)
	select {
	case d := <-cut:
		if d < idle {
			t.Errorf("the silent connection ended after %s, before the proxy's idle limit %s: not the proxy's cut", d, idle)
		}
	case <-time.After(idle):
		t.Fatalf("the proxy did not cut a connection silent for the whole step (%d idle cuts): the test proves nothing", px.idleCuts.Load())
	}
	if px.idleCuts.Load() == 0 {
		t.Errorf("the proxy counted no idle cut")
	}
	if lost > 0 {
		t.Errorf("the exec stream to the agent was cut %d times for idleness during a quiet step: heartbeats every %s did not keep it busy", lost, heartbeat)
	}
}

// TestKube_StreamCutMidOutputKeepsEveryLineOnceInOrder pins gitlab-runner
// #4119 (a stream cut mid-output repeats or loses lines): the proxy cuts every connection (the exec stream to the agent
// included) three times while a step prints 20,000 numbered lines; the
// step neither fails nor restarts, and its log has every line once, in
// order.
func TestKube_StreamCutMidOutputKeepsEveryLineOnceInOrder(t *testing.T) {
	f := newFixture(t)
	px := newProxy(t, f.rest.Host, 0)
	cfg := f.config()
	cfg.Rest = px.config(f.rest)
	logs := newCountingLog()
	cfg.Logger = slog.New(logs)
	s := f.prepare(t, f.executor(t, cfg), f.spec(t, runID("cut")))

	const n = 20000
	// ~10 s of output: 40 lines, then a pause of 20 ms. A marker file
	// says whether the script ever ran twice.
	script := fmt.Sprintf(`[ ! -e /tmp/ran ] || { echo "STEP RAN TWICE"; exit 9; }; : > /tmp/ran
i=1; while [ $i -le %d ]; do echo "line $i of %d"; [ $((i %% 40)) -ne 0 ] || sleep 0.02; i=$((i+1)); done`, n, n)
	var out syncbuf.Buffer
	marks := []int{n / 10, n / 3, 2 * n / 3}
	var cuts []string
	var cutMu sync.Mutex
	var next, size int
	cutting := writerFunc(func(p []byte) (int, error) {
		k, err := out.Write(p)
		// Lines are ~17 bytes: cut at about the marks' lines.
		cutMu.Lock()
		defer cutMu.Unlock()
		size += k
		if next < len(marks) && size >= marks[next]*17 {
			conns := px.cutAll()
			cuts = append(cuts, fmt.Sprintf("at byte %d: %d connections", size, conns))
			next++
		}
		return k, err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	res, err := await(t, startStep(ctx, s, executor.Step{ID: "1", Script: script}, cutting), 4*time.Minute)
	got := out.Bytes()
	lost, msgs := logs.count("connection to the step agent lost")
	cutMu.Lock()
	t.Logf("step took %s, %d bytes; cuts %v; agent connections lost %d: %q", time.Since(t0).Round(time.Millisecond), len(got), cuts, lost, msgs)
	cutMu.Unlock()
	if err != nil || res.ExitCode != 0 || res.Reason != "" {
		t.Fatalf("result %+v, err %v; want success (output ends %q)", res, err, tail(got))
	}
	if next < len(marks) {
		t.Errorf("only %d of %d cuts happened", next, len(marks))
	}
	if lost == 0 {
		t.Errorf("no connection to the agent was lost: the cuts missed the exec stream")
	}
	var want bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line %d of %d\n", i, n)
	}
	if !bytes.Equal(got, want.Bytes()) {
		lines := strings.Split(string(got), "\n")
		seen := map[string]int{}
		dup, bad := 0, 0
		for i, l := range lines[:len(lines)-1] {
			seen[l]++
			if seen[l] > 1 {
				dup++
			}
			if l != fmt.Sprintf("line %d of %d", i+1, n) && bad == 0 {
				bad = i + 1
				t.Errorf("line %d is %q", i+1, l)
			}
		}
		t.Fatalf("the log is not lines 1..%d once each in order: %d lines, %d repeated, first wrong at %d", n, len(lines)-1, dup, bad)
	}
}

func tail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}

// writerFunc is an io.Writer made of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
