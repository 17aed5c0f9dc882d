package oidc

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ClockSkew is how far before its issue time a token is valid ("nbf"): a
// relying party whose clock is behind the server's must not refuse a
// fresh token.
const ClockSkew = 30 * time.Second

// Claims are the claims of an id token (RFC 7519 §4.1 and Knotless's own).
// Every one but the audience is set by the server from what it recorded
// of the run, never from what the workflow or the runner says, so a
// relying party can write a policy on them. IDs are decimal strings, as
// relying parties compare strings (Kubernetes' CEL, cloud conditions).
type Claims struct {
	Issuer   string   `json:"iss"` // the server's --url
	Subject  string   `json:"sub"` // Subject's form
	Audience Audience `json:"aud"` // the workflow's `aud:`, or the issuer
	// ExpiresAt, NotBefore and IssuedAt are seconds since the Unix epoch.
	ExpiresAt int64  `json:"exp"`
	NotBefore int64  `json:"nbf"` // IssuedAt - ClockSkew
	IssuedAt  int64  `json:"iat"`
	ID        string `json:"jti"` // unique per token (TokenID)

	Repository      string `json:"repository"`       // OWNER/NAME
	RepositoryID    string `json:"repository_id"`    // the server's id of it: a repository made again under the name has another
	RepositoryOwner string `json:"repository_owner"` // OWNER
	Ref             string `json:"ref"`              // full ref: refs/heads/main, refs/tags/v1
	RefType         string `json:"ref_type"`         // "branch" or "tag"
	SHA             string `json:"sha"`              // the commit
	Workflow        string `json:"workflow"`         // the workflow's name
	WorkflowPath    string `json:"workflow_path"`    // .knotless/workflows/FILE
	Event           string `json:"event"`            // push, tag, manual, pull
	Actor           string `json:"actor"`            // the account that pushed or triggered
	// ActorCanPush is false when the run was started by an account that
	// cannot push to the repository (a pull from another account): a
	// policy that requires it true refuses those runs.
	ActorCanPush bool   `json:"actor_can_push"`
	RunID        string `json:"run_id"`
	PipelineID   string `json:"pipeline_id"`
	Runner       string `json:"runner"` // the name of the runner that holds the run
}

// Audience is a token's "aud": one string, or an array of them (RFC 7519
// §4.1.3); one value is written as a string.
type Audience []string

// MarshalJSON writes one value as a string, more as an array.
func (a Audience) MarshalJSON() ([]byte, error) {
	if len(a) == 1 {
		return json.Marshal(a[0])
	}
	return json.Marshal([]string(a))
}

// UnmarshalJSON reads a string or an array of strings.
func (a *Audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = Audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("aud: want a string or an array of strings")
	}
	*a = many
	return nil
}

// The jwt.Claims methods, so that golang-jwt signs Claims as they are.
func (c Claims) GetExpirationTime() (*jwt.NumericDate, error) { return numeric(c.ExpiresAt), nil }
func (c Claims) GetIssuedAt() (*jwt.NumericDate, error)       { return numeric(c.IssuedAt), nil }
func (c Claims) GetNotBefore() (*jwt.NumericDate, error)      { return numeric(c.NotBefore), nil }
func (c Claims) GetIssuer() (string, error)                   { return c.Issuer, nil }
func (c Claims) GetSubject() (string, error)                  { return c.Subject, nil }
func (c Claims) GetAudience() (jwt.ClaimStrings, error)       { return jwt.ClaimStrings(c.Audience), nil }

func numeric(s int64) *jwt.NumericDate { return jwt.NewNumericDate(time.Unix(s, 0)) }

// Subject is a token's "sub": "repo:OWNER/NAME:ref:REF" (REF the full ref,
// e.g. refs/heads/main) for every event but a pull, whose subject is
// "repo:OWNER/NAME:pull:REF" (REF the target branch), so that a pull's run
// never has the subject of the branch it targets. The form is stable:
// relying parties bind roles to it.
func Subject(repo, ref, event string) string {
	kind := "ref"
	if event == "pull" {
		kind = "pull"
	}
	return "repo:" + repo + ":" + kind + ":" + ref
}

// RefType is "tag" for refs/tags/..., else "branch".
func RefType(ref string) string {
	if strings.HasPrefix(ref, "refs/tags/") {
		return "tag"
	}
	return "branch"
}

// TokenID is the "jti" of the token named name of step step of run run
// issued at iat by issuer: a hash of those, so the same token made again
// has the same jti, and two tokens differ in it.
func TokenID(issuer string, run int64, step int, name string, iat int64) string {
	h := sha256.Sum256([]byte(strings.Join([]string{issuer, strconv.FormatInt(run, 10), strconv.Itoa(step), name, strconv.FormatInt(iat, 10)}, "\x00")))
	return b64(h[:18])
}

// Issuer signs id tokens with the keys of a Keyring.
type Issuer struct {
	// URL is the issuer ("iss"): the server's public --url, no trailing
	// slash. Discovery is at URL + DiscoveryPath.
	URL  string
	Keys *Keyring
}

// ErrNoKey is Sign's error when the keys file cannot be read.
var ErrNoKey = errors.New("no id token signing key")

// Sign returns the compact JWS (RFC 7515 §7.1) of c, signed RS256 with the
// key that was current at c.IssuedAt (KeySet.ForTime), whose ID it puts in
// the header's "kid", and that key's ID. The same claims signed again give
// the same token, byte for byte, as long as that key is published. The
// issuer and the times in c are the caller's to set.
func (i *Issuer) Sign(c Claims, now time.Time) (token, kid string, err error) {
	set, err := i.Keys.Keys()
	if set == nil {
		return "", "", fmt.Errorf("%w: %v", ErrNoKey, err)
	}
	if err != nil {
		return "", "", err // a broken keys file: refuse rather than sign with a key a rotation removed
	}
	k := set.ForTime(time.Unix(c.IssuedAt, 0), now)
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	t.Header["kid"] = k.ID
	s, err := t.SignedString(k.priv)
	if err != nil {
		return "", "", fmt.Errorf("sign an id token: %w", err)
	}
	return s, k.ID, nil
}
