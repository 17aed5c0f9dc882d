// Package svcauth signs and verifies the atproto service-auth JWTs runners
// send with every request (https://atproto.com/specs/xrpc#inter-service-authentication-jwt):
// iss = the runner's DID, aud = the server's DID, lxm = the XRPC method,
// a short expiry and a unique jti. It signs with indigo's atproto/auth and
// verifies with the same JWT library and key types, adding what indigo's
// validator leaves out: refusing replayed jti values and tokens that live
// too long.
//
// It never logs or returns token contents in errors.
package svcauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/auth"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/golang-jwt/jwt/v5"

	"knotless.dev/knotless/internal/api"
)

// DefaultTTL is the lifetime of tokens Signer makes.
const DefaultTTL = 60 * time.Second

// MaxTTL is the longest lifetime (exp - iat) Verifier accepts.
const MaxTTL = 5 * time.Minute

// GenerateKey makes a new P-256 signing key.
func GenerateKey() (atcrypto.PrivateKeyExportable, error) {
	k, err := atcrypto.GeneratePrivateKeyP256()
	if err != nil {
		return nil, fmt.Errorf("generate P-256 key: %w", err)
	}
	return k, nil
}

// ParseKey reads a private key in the multibase form Multibase() writes.
func ParseKey(multibase string) (atcrypto.PrivateKeyExportable, error) {
	k, err := atcrypto.ParsePrivateMultibase(strings.TrimSpace(multibase))
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	return k, nil
}

// DIDKey returns the did:key DID of a private key's public half.
func DIDKey(k atcrypto.PrivateKey) (string, error) {
	pub, err := k.PublicKey()
	if err != nil {
		return "", fmt.Errorf("public key: %w", err)
	}
	return pub.DIDKey(), nil
}

// Signer makes tokens for one issuer and audience. Safe for concurrent use.
type Signer struct {
	DID      string // issuer: the runner's DID
	Audience string // the server's DID
	Key      atcrypto.PrivateKey
	TTL      time.Duration // 0 means DefaultTTL
}

// Token returns a fresh JWT bound to the XRPC method nsid.
func (s *Signer) Token(nsid string) (string, error) {
	iss, err := syntax.ParseDID(s.DID)
	if err != nil {
		return "", fmt.Errorf("issuer DID: %w", err)
	}
	lxm, err := syntax.ParseNSID(nsid)
	if err != nil {
		return "", fmt.Errorf("method %q: %w", nsid, err)
	}
	ttl := s.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	return auth.SignServiceAuth(iss, s.Audience, ttl, &lxm, s.Key)
}

// AuthFunc returns an api.AuthFunc that sends a fresh token per request.
func (s *Signer) AuthFunc() api.AuthFunc {
	return func(req *http.Request, nsid string) error {
		tok, err := s.Token(nsid)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return nil
	}
}

// Errors of Verify; the server maps them to XRPC errors.
var (
	ErrExpired     = errors.New("token expired")
	ErrWrongMethod = errors.New("token was issued for another method (lxm)")
	ErrReplayed    = errors.New("token was already used (jti)")
	ErrTooLong     = errors.New("token lifetime exceeds the maximum")
	ErrInvalid     = errors.New("token invalid")
)

// KeyLookup returns the public key of a DID. It is how the verifier knows
// runners: registered runners' keys, or the key inside a did:key.
type KeyLookup func(ctx context.Context, did string) (atcrypto.PublicKey, error)

// DIDKeyLookup resolves only did:key DIDs, from the DID itself.
func DIDKeyLookup(_ context.Context, did string) (atcrypto.PublicKey, error) {
	if !strings.HasPrefix(did, "did:key:") {
		return nil, fmt.Errorf("%s is not a did:key", did)
	}
	return atcrypto.ParsePublicDIDKey(did)
}

// ReplayCache remembers jti values until they expire. Seen records jti and
// reports whether it was recorded before. Implementations must be safe for
// concurrent use.
type ReplayCache interface {
	Seen(jti string, exp time.Time) bool
}

// Verifier checks runner tokens. Safe for concurrent use.
type Verifier struct {
	Audience string    // the server's DID
	Keys     KeyLookup // how issuers' keys are found
	Replay   ReplayCache
	// Leeway tolerates clock skew on exp and iat; 0 means 5 s.
	Leeway time.Duration
}

// Verify checks the signature, audience, expiry, lifetime, lxm == nsid and
// that jti was never seen, and returns the issuer's DID. Errors wrap one of
// ErrExpired, ErrWrongMethod, ErrReplayed, ErrTooLong or ErrInvalid.
//
// It looks the issuer's key up once and logs nothing: indigo's
// ServiceAuthValidator, on a bad signature, logs an INFO line through
// slog's default logger and looks the key up a second time (it purges a
// caching directory first), which lets anyone with a forged token write
// to the server's log at any log level.
func (v *Verifier) Verify(ctx context.Context, token, nsid string) (string, error) {
	lxm, err := syntax.ParseNSID(nsid)
	if err != nil {
		return "", fmt.Errorf("%w: method %q: %v", ErrInvalid, nsid, err)
	}
	var iss syntax.DID
	keyFunc := func(t *jwt.Token) (any, error) {
		c, ok := t.Claims.(*claims)
		if !ok || c.Issuer == "" {
			return nil, fmt.Errorf("%w: missing 'iss' claim", jwt.ErrTokenInvalidIssuer)
		}
		did, err := syntax.ParseDID(c.Issuer)
		if err != nil {
			return nil, fmt.Errorf("%w: invalid DID: %v", jwt.ErrTokenInvalidIssuer, err)
		}
		key, err := v.Keys(ctx, did.String())
		if err != nil {
			return nil, fmt.Errorf("%w: key of %s: %v", jwt.ErrTokenInvalidIssuer, did, err)
		}
		iss = did
		return key, nil
	}
	var c claims
	_, err = jwt.ParseWithClaims(token, &c, keyFunc,
		jwt.WithValidMethods(validMethods),
		jwt.WithAudience(v.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(v.leeway()))
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", fmt.Errorf("%w: %v", ErrExpired, err)
	case err != nil:
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	case c.LexMethod != lxm.String():
		return "", fmt.Errorf("%w: want %s", ErrWrongMethod, nsid)
	case c.ID == "" || c.ExpiresAt == nil || c.IssuedAt == nil:
		return "", fmt.Errorf("%w: jti, exp and iat are required", ErrInvalid)
	case c.ExpiresAt.Sub(c.IssuedAt.Time) > MaxTTL:
		return "", ErrTooLong
	}
	if v.Replay != nil && v.Replay.Seen(iss.String()+" "+c.ID, c.ExpiresAt.Add(v.leeway())) {
		return "", ErrReplayed
	}
	return iss.String(), nil
}

// claims are a service-auth JWT's: the registered ones and lxm, the XRPC
// method the token is for.
type claims struct {
	jwt.RegisteredClaims
	LexMethod string `json:"lxm,omitempty"`
}

// validMethods are the JWT algorithms of atproto keys (P-256 and
// secp256k1); importing indigo's atproto/auth registers them with jwt.
var validMethods = []string{"ES256", "ES256K"}

func (v *Verifier) leeway() time.Duration {
	if v.Leeway == 0 {
		return 5 * time.Second
	}
	return v.Leeway
}

// MemoryReplayCache is an in-process ReplayCache. Entries are dropped once
// expired. A restarted server forgets them; tokens live at most MaxTTL.
type MemoryReplayCache struct {
	mu        sync.Mutex
	seen      map[string]time.Time
	now       func() time.Time
	lastSweep time.Time
}

// NewMemoryReplayCache returns an empty cache.
func NewMemoryReplayCache() *MemoryReplayCache {
	return &MemoryReplayCache{seen: map[string]time.Time{}, now: time.Now}
}

// Seen implements ReplayCache.
func (c *MemoryReplayCache) Seen(jti string, exp time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.lastSweep) > 10*time.Second {
		c.lastSweep = now
		for k, e := range c.seen {
			if now.After(e) {
				delete(c.seen, k)
			}
		}
	}
	if e, ok := c.seen[jti]; ok && !now.After(e) {
		return true
	}
	c.seen[jti] = exp
	return false
}
