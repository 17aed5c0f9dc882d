package server_test

import (
	"context"
	"net/http"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/golang-jwt/jwt/v5"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/svcauth"
	"knotless.dev/knotless/internal/testenv"
)

// Helpers of the tests that attack the server as a stranger or a
// misbehaving runner would (items 4, 5, 9 and 11 of the hostile-load
// issue).

// hostileToken signs a service-auth token for lxm with any jti, as a
// client that does not use svcauth.Signer would.
func hostileToken(t *testing.T, key atcrypto.PrivateKey, iss, aud, lxm, jti string) string {
	t.Helper()
	now := time.Now()
	tok, err := jwt.NewWithClaims(jwt.GetSigningMethod("ES256"), jwt.MapClaims{
		"iss": iss, "aud": aud, "lxm": lxm, "jti": jti,
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(),
	}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// freshKey makes a key and its did:key, as a stranger makes as many as it
// likes.
func freshKey(t *testing.T) (atcrypto.PrivateKey, string) {
	t.Helper()
	key, err := svcauth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	did, err := svcauth.DIDKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, did
}

// attackClient sends each request on a new connection, so that connections
// of refused requests do not linger as idle keep-alives.
func attackClient(base string, tok string) *api.Client {
	c := withToken(base, tok)
	c.HTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	return c
}

// heapMB is the live heap after a collection, in MiB: in-process, the
// server's memory is the test process's.
func heapMB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// openFDs counts this process's open file descriptors (the in-process
// server's and the test's clients').
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		testenv.Skipf(t, "cannot count file descriptors: %v", err)
	}
	return len(ents)
}

// latencyProbe calls whoami as a normal client every 50 ms until stop and
// records the slowest answer and any failure.
type latencyProbe struct {
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	worst time.Duration
	calls int
	err   error
}

func startLatencyProbe(c *api.Client) *latencyProbe {
	p := &latencyProbe{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var a api.Account
			err := c.Query(ctx, api.MethodWhoAmI, nil, &a)
			cancel()
			d := time.Since(start)
			p.mu.Lock()
			p.calls++
			p.worst = max(p.worst, d)
			if err != nil && p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
			select {
			case <-p.stopc:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return p
}

// stop ends the probe and fails t if a normal request failed or took a
// second or more.
func (p *latencyProbe) stop(t *testing.T) {
	t.Helper()
	close(p.stopc)
	<-p.done
	t.Logf("normal client: %d calls during the attack, slowest %s", p.calls, p.worst.Round(time.Millisecond))
	if p.err != nil {
		t.Errorf("a normal client's request failed during the attack: %v", p.err)
	}
	if p.worst >= time.Second {
		t.Errorf("a normal client waited %s for an answer during the attack, want under 1 s", p.worst)
	}
}
