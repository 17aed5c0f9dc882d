package oidc

import (
	"encoding/json"
	"log/slog"
	"math/big"
	"net/http"
	"time"
)

// Paths the issuer serves, below its URL.
const (
	// DiscoveryPath is the OpenID Provider configuration (OpenID Connect
	// Discovery 1.0 §4).
	DiscoveryPath = "/.well-known/openid-configuration"
	// JWKSPath is the JSON Web Key Set (RFC 7517 §5) of the published keys.
	JWKSPath = "/.well-known/jwks.json"
)

// ClaimNames lists every claim a token carries (the configuration's
// claims_supported).
var ClaimNames = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti",
	"repository", "repository_id", "repository_owner", "ref", "ref_type", "sha", "workflow", "workflow_path",
	"event", "actor", "actor_can_push", "run_id", "pipeline_id", "runner"}

// Configuration is the issuer's OpenID Provider metadata (OpenID Connect
// Discovery 1.0 §3), as a CI issuer has it: tokens are only ever issued
// to the server's own runs, so there is no authorization endpoint (GitHub
// Actions' and GitLab CI's issuers leave it out too; Kubernetes and the
// clouds read only issuer and jwks_uri).
type Configuration struct {
	Issuer                           string   `json:"issuer"`
	JWKSURI                          string   `json:"jwks_uri"`
	ResponseTypesSupported           []string `json:"response_types_supported"`
	SubjectTypesSupported            []string `json:"subject_types_supported"`
	IDTokenSigningAlgValuesSupported []string `json:"id_token_signing_alg_values_supported"`
	ScopesSupported                  []string `json:"scopes_supported"`
	ClaimsSupported                  []string `json:"claims_supported"`
}

// Configuration returns the issuer's metadata.
func (i *Issuer) Configuration() Configuration {
	return Configuration{
		Issuer:                           i.URL,
		JWKSURI:                          i.URL + JWKSPath,
		ResponseTypesSupported:           []string{"id_token"},
		SubjectTypesSupported:            []string{"public"},
		IDTokenSigningAlgValuesSupported: []string{Algorithm},
		ScopesSupported:                  []string{"openid"},
		ClaimsSupported:                  ClaimNames,
	}
}

// JWK is one RSA public key as a JSON Web Key (RFC 7517 §4, RFC 7518
// §6.3.1).
type JWK struct {
	KeyType   string `json:"kty"` // "RSA"
	Use       string `json:"use"` // "sig"
	Algorithm string `json:"alg"` // Algorithm
	ID        string `json:"kid"`
	N         string `json:"n"` // modulus, base64url big-endian
	E         string `json:"e"` // exponent, base64url big-endian
}

// JWKS is a JSON Web Key Set (RFC 7517 §5).
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK returns k's public key as a JWK.
func (k Key) PublicJWK() JWK {
	pub := k.Public()
	return JWK{KeyType: "RSA", Use: "sig", Algorithm: Algorithm, ID: k.ID,
		N: b64(pub.N.Bytes()), E: b64(big.NewInt(int64(pub.E)).Bytes())}
}

// JWKS returns the keys published at now, newest first.
func (s *KeySet) JWKS(now time.Time) JWKS {
	out := JWKS{Keys: []JWK{}}
	for _, k := range s.Published(now) {
		out.Keys = append(out.Keys, k.PublicJWK())
	}
	return out
}

// maxAge is how long relying parties and proxies may cache the
// configuration and the keys: a rotation's new key is published before
// any token names it, and relying parties fetch the keys again when a
// token names a kid they do not know.
const maxAge = "public, max-age=60"

// ServeConfiguration answers GET DiscoveryPath.
func (i *Issuer) ServeConfiguration(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, i.Configuration())
}

// ServeJWKS answers GET JWKSPath with the keys published now. When the
// keys file cannot be read again it serves the keys it last read (and
// logs why to log); 503 when it never read any.
func (i *Issuer) ServeJWKS(log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		set, err := i.Keys.Keys()
		if err != nil {
			log.Error("read the id token keys for the JWKS", "err", err)
		}
		if set == nil {
			http.Error(w, "the id token keys cannot be read; see the server log", http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, set.JWKS(time.Now()))
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", maxAge)
	_, _ = w.Write(append(b, '\n'))
}
