// Package oidc makes the server an OpenID Connect issuer of id tokens: a
// short-lived JWT the server signs for one step of one run, naming the
// repository, the ref and the audience the workflow chose, so that a
// relying party (a Kubernetes API server, a cloud, Vault) trusts the run
// itself instead of a stored secret.
//
//   - keys.go: the signing keys in DATA/oidc-keys.json (RSA 2048, RS256,
//     kid = RFC 7638 thumbprint), written whole, reloaded when the file
//     changes, rotated with a grace during which the retired key stays
//     published;
//   - token.go: the claims (Claims) and the signature (Issuer.Sign): the
//     same claims give the same token, byte for byte;
//   - discovery.go: /.well-known/openid-configuration (OpenID Connect
//     Discovery 1.0) and the JWKS (RFC 7517) a relying party fetches.
//
// It must never log a token or a private key, and never write a token
// anywhere: tokens are made again (the same bytes) instead of kept.
package oidc
