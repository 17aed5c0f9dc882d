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
	"crypto/sha256"
	"encoding/binary"
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

// MaxTokenBytes is the longest token Verifier parses: a service-auth JWT
// of a P-256 or K-256 key is about 500 bytes.
const MaxTokenBytes = 4 << 10

// MaxJTIBytes is the longest jti Verifier accepts (Signer makes 22):
// every accepted jti is remembered until its token expires.
const MaxJTIBytes = 128

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
	// ErrReplayFull: the replay cache holds as many unexpired tokens as
	// it may; it refuses new ones until some expire (it never forgets a
	// used one early, which would let it be replayed).
	ErrReplayFull = errors.New("too many unexpired tokens to remember another")
	// ErrIssuerFull: the replay cache holds as many unexpired tokens of
	// this issuer as it may hold for one.
	ErrIssuerFull = errors.New("too many unexpired tokens of this issuer to remember another")
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

// ReplayCache remembers the jti values of accepted tokens until they
// expire. Record remembers jti of issuer until exp; it fails with
// ErrReplayed when that jti of that issuer is remembered already, and with
// ErrReplayFull or ErrIssuerFull (remembering nothing) when it may not
// hold another: an entry is never dropped before exp. Implementations must
// be safe for concurrent use.
type ReplayCache interface {
	Record(issuer, jti string, exp time.Time) error
}

// Verifier checks runner tokens. Safe for concurrent use.
type Verifier struct {
	Audience string    // the server's DID
	Keys     KeyLookup // how issuers' keys are found
	Replay   ReplayCache
	// Leeway tolerates clock skew on exp and iat; 0 means 5 s.
	Leeway time.Duration
}

// Claims are what Check found in a valid token.
type Claims struct {
	Issuer string    // the issuer's DID
	JTI    string    // at most MaxJTIBytes
	Until  time.Time // exp plus the leeway: until when the token is accepted
}

// Verify checks the signature, audience, expiry, lifetime, lxm == nsid and
// that jti was never seen, and returns the issuer's DID. Errors wrap one of
// ErrExpired, ErrWrongMethod, ErrReplayed, ErrTooLong, ErrInvalid,
// ErrReplayFull or ErrIssuerFull. It is Check followed by Consume.
func (v *Verifier) Verify(ctx context.Context, token, nsid string) (string, error) {
	c, err := v.Check(ctx, token, nsid)
	if err != nil {
		return "", err
	}
	if err := v.Consume(c); err != nil {
		return "", err
	}
	return c.Issuer, nil
}

// Check is Verify without the replay check: a caller that refuses some
// valid tokens anyway (an issuer not allowed to call) calls Consume only
// for those it accepts, so that they alone take room in the replay cache.
// A token longer than MaxTokenBytes is refused before it is parsed.
//
// It looks the issuer's key up once and logs nothing: indigo's
// ServiceAuthValidator, on a bad signature, logs an INFO line through
// slog's default logger and looks the key up a second time (it purges a
// caching directory first), which lets anyone with a forged token write
// to the server's log at any log level.
func (v *Verifier) Check(ctx context.Context, token, nsid string) (Claims, error) {
	if len(token) > MaxTokenBytes {
		return Claims{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxTokenBytes)
	}
	lxm, err := syntax.ParseNSID(nsid)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: method %q: %v", ErrInvalid, nsid, err)
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
		return Claims{}, fmt.Errorf("%w: %v", ErrExpired, err)
	case err != nil:
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	case c.LexMethod != lxm.String():
		return Claims{}, fmt.Errorf("%w: want %s", ErrWrongMethod, nsid)
	case c.ID == "" || c.ExpiresAt == nil || c.IssuedAt == nil:
		return Claims{}, fmt.Errorf("%w: jti, exp and iat are required", ErrInvalid)
	case len(c.ID) > MaxJTIBytes:
		return Claims{}, fmt.Errorf("%w: jti longer than %d bytes", ErrInvalid, MaxJTIBytes)
	case c.ExpiresAt.Sub(c.IssuedAt.Time) > MaxTTL:
		return Claims{}, ErrTooLong
	}
	return Claims{Issuer: iss.String(), JTI: c.ID, Until: c.ExpiresAt.Add(v.leeway())}, nil
}

// Consume records c's jti in the replay cache (if any): ErrReplayed when
// it was recorded before, ErrReplayFull or ErrIssuerFull when the cache
// may not hold it.
func (v *Verifier) Consume(c Claims) error {
	if v.Replay == nil {
		return nil
	}
	return v.Replay.Record(c.Issuer, c.JTI, c.Until)
}

func (v *Verifier) leeway() time.Duration {
	if v.Leeway == 0 {
		return 5 * time.Second
	}
	return v.Leeway
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

// MemoryReplayCache is an in-process ReplayCache of bounded size. Entries
// are dropped once expired, in constant time per entry (they are grouped
// by the second they expire in). An entry costs about 65 bytes whatever
// the length of its jti (it is kept as a 128-bit hash of issuer and jti).
// A restarted server forgets them; tokens live at most MaxTTL.
type MemoryReplayCache struct {
	max, perIssuer int
	now            func() time.Time

	mu      sync.Mutex
	seen    map[replayKey]struct{}
	issuers map[uint64]int          // issuer hash → entries
	byExp   map[int64][]replayEntry // second of expiry → entries
	swept   int64                   // seconds before this one are dropped
}

type replayKey [16]byte

type replayEntry struct {
	key    replayKey
	issuer uint64
}

// NewMemoryReplayCache returns an empty cache that holds at most max
// entries, at most perIssuer of one issuer (0: no limit).
func NewMemoryReplayCache(max, perIssuer int) *MemoryReplayCache {
	return &MemoryReplayCache{max: max, perIssuer: perIssuer, now: time.Now,
		seen: map[replayKey]struct{}{}, issuers: map[uint64]int{}, byExp: map[int64][]replayEntry{}}
}

// Len returns the number of entries held (none of them expired).
func (c *MemoryReplayCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(c.now().Unix())
	return len(c.seen)
}

// Record implements ReplayCache.
func (c *MemoryReplayCache) Record(issuer, jti string, exp time.Time) error {
	h := sha256.New()
	h.Write([]byte(issuer))
	ih := binary.BigEndian.Uint64(h.Sum(nil))
	h.Write([]byte{0})
	h.Write([]byte(jti))
	var key replayKey
	copy(key[:], h.Sum(nil))

	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().Unix()
	c.sweep(now)
	if _, ok := c.seen[key]; ok {
		return ErrReplayed
	}
	if c.max > 0 && len(c.seen) >= c.max {
		return ErrReplayFull
	}
	if c.perIssuer > 0 && c.issuers[ih] >= c.perIssuer {
		return ErrIssuerFull
	}
	sec := exp.Unix()
	if exp.After(time.Unix(sec, 0)) {
		sec++ // kept until the end of the second exp falls in, never less
	}
	sec = max(sec, now+1)
	c.seen[key] = struct{}{}
	c.issuers[ih]++
	c.byExp[sec] = append(c.byExp[sec], replayEntry{key: key, issuer: ih})
	return nil
}

// sweep drops the entries that expired by second now (inclusive).
func (c *MemoryReplayCache) sweep(now int64) {
	if c.swept == 0 || now-c.swept > int64(len(c.byExp)) {
		for sec := range c.byExp { // long idle: fewer buckets than seconds
			if sec <= now {
				c.drop(sec)
			}
		}
	} else {
		for sec := c.swept; sec <= now; sec++ {
			c.drop(sec)
		}
	}
	c.swept = max(c.swept, now+1)
}

func (c *MemoryReplayCache) drop(sec int64) {
	for _, e := range c.byExp[sec] {
		delete(c.seen, e.key)
		if c.issuers[e.issuer]--; c.issuers[e.issuer] <= 0 {
			delete(c.issuers, e.issuer)
		}
	}
	delete(c.byExp, sec)
}
