package svcauth

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/golang-jwt/jwt/v5"
)

// signClaims signs arbitrary claims with key, as a hostile client would.
func signClaims(t *testing.T, key atcrypto.PrivateKey, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.GetSigningMethod("ES256"), claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestVerify_LongJTIOrTokenIsRefusedAndNothingRemembered(t *testing.T) {
	s, v := newPair(t)
	cache := NewMemoryReplayCache(0, 0)
	v.Replay = cache
	now := time.Now()
	claims := func(jti string) jwt.MapClaims {
		return jwt.MapClaims{"iss": s.DID, "aud": v.Audience, "lxm": "dev.knotless.runner.claim",
			"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": jti}
	}
	for name, jti := range map[string]string{
		"760 KB jti (token over MaxTokenBytes)": strings.Repeat("j", 760<<10),
		"jti over MaxJTIBytes":                  strings.Repeat("j", MaxJTIBytes+1),
	} {
		tok := signClaims(t, s.Key, claims(jti))
		if _, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if n := cache.Len(); n != 0 {
		t.Errorf("the cache holds %d entries after refused tokens, want 0", n)
	}
	ok := signClaims(t, s.Key, claims(strings.Repeat("j", MaxJTIBytes)))
	if _, err := v.Verify(context.Background(), ok, "dev.knotless.runner.claim"); err != nil {
		t.Errorf("jti of exactly MaxJTIBytes: %v", err)
	}
}

func TestReplayCache_FullRefusesNewTokensAndNeverForgetsUsedOnes(t *testing.T) {
	c := NewMemoryReplayCache(3, 2)
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	exp := now.Add(65 * time.Second)
	for _, e := range []struct {
		iss, jti string
		want     error
	}{
		{"did:a", "1", nil},
		{"did:a", "2", nil},
		{"did:a", "1", ErrReplayed},
		{"did:a", "3", ErrIssuerFull}, // two of did:a already
		{"did:b", "1", nil},           // same jti, other issuer
		{"did:c", "1", ErrReplayFull}, // three in all
		{"did:a", "2", ErrReplayed},   // full, yet still remembered
		{"did:b", "1", ErrReplayed},
	} {
		if err := c.Record(e.iss, e.jti, exp); !errors.Is(err, e.want) {
			t.Errorf("Record(%s, %s) = %v, want %v", e.iss, e.jti, err, e.want)
		}
	}
	now = exp.Add(-time.Millisecond) // one moment before expiry: still there
	if err := c.Record("did:a", "1", exp); !errors.Is(err, ErrReplayed) {
		t.Errorf("just before exp: %v, want ErrReplayed", err)
	}
	now = exp.Add(time.Second) // expired: dropped, room again
	if n := c.Len(); n != 0 {
		t.Errorf("after exp: %d entries, want 0", n)
	}
	if err := c.Record("did:c", "1", now.Add(time.Minute)); err != nil {
		t.Errorf("after the old entries expired: %v", err)
	}
}

func TestReplayCache_HalfAMillionTokensStayInTensOfMegabytes(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a cache of 500,000 entries")
	}
	const n = 500_000
	c := NewMemoryReplayCache(n, 0)
	base := time.Now()
	c.now = func() time.Time { return base }
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	start := time.Now()
	for i := range n {
		// Spread over the lifetime of a token, as live traffic is.
		exp := base.Add(time.Duration(5+i%300) * time.Second)
		if err := c.Record(fmt.Sprintf("did:key:runner%03d", i%100), fmt.Sprintf("jti-%022d", i), exp); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Record("did:key:one-more", "x", base.Add(time.Minute)); !errors.Is(err, ErrReplayFull) {
		t.Fatalf("full cache: err = %v, want ErrReplayFull", err)
	}
	grew := heap() - before
	t.Logf("%d entries: %.1f MB of heap (%d bytes each), filled in %s", n, float64(grew)/(1<<20), grew/n, time.Since(start).Round(time.Millisecond))
	if grew > 64<<20 {
		t.Errorf("%d entries take %d MB, want at most 64 MB", n, grew>>20)
	}
	// Expiry drops them in constant time per entry: all gone after 305 s.
	base = base.Add(306 * time.Second)
	start = time.Now()
	if l := c.Len(); l != 0 {
		t.Errorf("after every token expired: %d entries, want 0", l)
	}
	t.Logf("dropping %d expired entries took %s", n, time.Since(start).Round(time.Millisecond))
}
