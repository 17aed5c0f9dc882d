// Package svcauth signs and verifies the atproto service-auth JWTs runners
// send with every request (https://atproto.com/specs/xrpc#inter-service-authentication-jwt):
// iss = the runner's DID, aud = the server's DID, lxm = the XRPC method,
// a short expiry and a unique jti. It wraps indigo's atproto/auth and
// atproto/atcrypto and adds what they leave out: refusing replayed jti
// values and tokens that live too long.
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
	"github.com/bluesky-social/indigo/atproto/identity"
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
func (v *Verifier) Verify(ctx context.Context, token, nsid string) (string, error) {
	lxm, err := syntax.ParseNSID(nsid)
	if err != nil {
		return "", fmt.Errorf("%w: method %q: %v", ErrInvalid, nsid, err)
	}
	val := auth.ServiceAuthValidator{
		Audience:        v.Audience,
		Dir:             directory{keys: v.Keys},
		TimestampLeeway: v.leeway(),
	}
	did, err := val.Validate(ctx, token, &lxm)
	if err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return "", fmt.Errorf("%w: %v", ErrExpired, err)
		case strings.Contains(err.Error(), "Lexicon endpoint (LXM)"):
			return "", fmt.Errorf("%w: want %s", ErrWrongMethod, nsid)
		default:
			return "", fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	// The signature is valid: reading the claims without re-verifying is safe.
	var claims jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &claims); err != nil {
		return "", fmt.Errorf("%w: claims: %v", ErrInvalid, err)
	}
	if claims.ID == "" || claims.ExpiresAt == nil || claims.IssuedAt == nil {
		return "", fmt.Errorf("%w: jti, exp and iat are required", ErrInvalid)
	}
	if claims.ExpiresAt.Sub(claims.IssuedAt.Time) > MaxTTL {
		return "", ErrTooLong
	}
	if v.Replay != nil && v.Replay.Seen(did.String()+" "+claims.ID, claims.ExpiresAt.Add(v.leeway())) {
		return "", ErrReplayed
	}
	return did.String(), nil
}

func (v *Verifier) leeway() time.Duration {
	if v.Leeway == 0 {
		return 5 * time.Second
	}
	return v.Leeway
}

// directory adapts a KeyLookup to indigo's identity.Directory.
type directory struct{ keys KeyLookup }

func (d directory) LookupDID(ctx context.Context, did syntax.DID) (*identity.Identity, error) {
	pub, err := d.keys(ctx, did.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", identity.ErrDIDNotFound, err)
	}
	return &identity.Identity{
		DID:    did,
		Handle: syntax.HandleInvalid,
		Keys: map[string]identity.VerificationMethod{
			"atproto": {Type: "Multikey", PublicKeyMultibase: pub.Multibase()},
		},
	}, nil
}

func (d directory) LookupHandle(context.Context, syntax.Handle) (*identity.Identity, error) {
	return nil, identity.ErrHandleNotFound
}

func (d directory) Lookup(ctx context.Context, atid syntax.AtIdentifier) (*identity.Identity, error) {
	did, err := atid.AsDID()
	if err != nil {
		return nil, identity.ErrHandleNotFound
	}
	return d.LookupDID(ctx, did)
}

func (d directory) Purge(context.Context, syntax.AtIdentifier) error { return nil }

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
