package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/svcauth"
)

// Issue 14, item 4: self-signed tokens with 760 KB jti values took the
// server to 2 GiB in 33 s, held for up to 5 minutes; valid tokens could
// fill the replay cache without bound.
func TestServer_ReplayCacheStaysBoundedUnderLongJTIs(t *testing.T) {
	const registrations = 300 // the registrations' cache, small to fill it quickly
	f := newFixture(t, servertest.Options{ClientLimits: server.ClientLimits{ReplayRegistration: registrations}})
	ctx := context.Background()
	// A run in progress, whose runner must not notice the attack.
	r, c := claimedRun(t, f)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, State: api.StepRunning}, nil)
	probe := startLatencyProbe(f.Admin())
	before := heapMB()

	// 200 registrations, each by a fresh key, each token with a 760 KB
	// jti: refused before they are parsed, or by the jti bound; nothing
	// is remembered.
	const long, workers = 200, 8
	jti := strings.Repeat("j", 760_000)
	var refused atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < long; i += workers {
				key, did := freshKey(t)
				tok := hostileToken(t, key, did, f.DID(), api.MethodRegisterRunner, jti)
				err := attackClient(f.URL, tok).Procedure(ctx, api.MethodRegisterRunner,
					api.RegisterRunnerInput{Repo: f.repo, Name: fmt.Sprintf("long%03d", i)}, nil)
				var e *api.Error
				// 401 from the token check, or 431 if the header limit
				// refuses the request before it.
				if errorAs(err, &e) && (e.Status == http.StatusUnauthorized || e.Status == http.StatusRequestHeaderFieldsTooLarge) {
					refused.Add(1)
				} else {
					t.Errorf("registration with a 760 KB jti: err = %v, want 401 or 431", err)
				}
			}
		}()
	}
	wg.Wait()
	afterLong := heapMB()
	t.Logf("%d tokens with 760 KB jti values: all refused in %s; heap %.1f → %.1f MB",
		refused.Load(), time.Since(start).Round(time.Millisecond), before, afterLong)
	if afterLong-before > 24 {
		t.Errorf("heap grew by %.1f MB under tokens with long jti values, want under 24 MB (nothing of them is kept)", afterLong-before)
	}

	// Valid registrations by fresh keys until the registrations' cache is
	// full: then new tokens are refused (503), used ones stay refused.
	var firstToken string
	var accepted, fullRefusals int
	for i := range registrations + 50 {
		key, did := freshKey(t)
		signer := &svcauth.Signer{DID: did, Audience: f.DID(), Key: key}
		tok, err := signer.Token(api.MethodRegisterRunner)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			firstToken = tok
		}
		err = registeringClient(f, tok).Procedure(ctx, api.MethodRegisterRunner,
			api.RegisterRunnerInput{Repo: f.repo, Name: fmt.Sprintf("s%04d", i)}, nil)
		var e *api.Error
		switch {
		case err == nil || api.IsError(err, api.ErrTooManyPending): // the token was recorded
			accepted++
		case errorAs(err, &e) && e.Status == http.StatusServiceUnavailable && e.Name == api.ErrTooManyTokens:
			fullRefusals++
			if !strings.Contains(e.Message, "retry") {
				t.Errorf("full cache message does not say what to do: %q", e.Message)
			}
		default:
			t.Fatalf("registration %d: %v", i, err)
		}
	}
	// r1's own registration took one place.
	if accepted != registrations-1 || fullRefusals != 51 {
		t.Errorf("%d registrations recorded and %d refused as full; want %d and 51", accepted, fullRefusals, registrations-1)
	}
	err := registeringClient(f, firstToken).Procedure(ctx, api.MethodRegisterRunner, api.RegisterRunnerInput{Repo: f.repo, Name: "s0000"}, nil)
	if !api.IsError(err, api.ErrInvalidToken) || !strings.Contains(err.Error(), "already used") {
		t.Errorf("replayed registration token while the cache is full: err = %v, want InvalidToken, already used", err)
	}

	// The approved runner's own tokens are remembered apart: its run
	// goes on and ends as it would have.
	var hb api.HeartbeatOutput
	procedure(t, r, api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, &hb)
	if _, err := appendLog(r, c.Run.ID, 1, 0, "still here\n"); err != nil {
		t.Fatal(err)
	}
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: c.Run.ID, State: api.StateSucceeded}, nil)
	probe.stop(t)
	got := getRun(t, f, c.Run.ID)
	if got.State != api.StateSucceeded || f.runLog(t, c.Run.ID, 1) != "still here\n" {
		t.Errorf("run after the attack: %s, log %q; want succeeded with its log", got.State, f.runLog(t, c.Run.ID, 1))
	}
	after := heapMB()
	t.Logf("heap after %d remembered registrations: %.1f MB (%.1f before the attack)", registrations, after, before)
	if after-before > 32 {
		t.Errorf("heap grew by %.1f MB, want under 32 MB", after-before)
	}
}

// registeringClient is attackClient with the admin's registration
// credential: registrations that get past it.
func registeringClient(f *fixture, tok string) *api.Client {
	c := attackClient(f.URL, tok)
	c.Auth = servertest.RegistrationAuth(c.Auth, f.AdminToken)
	return c
}
