// Package server is knotless-server: the XRPC API under /xrpc/<NSID>, git
// smart HTTP hosting at /OWNER/NAME.git (fetches by `git upload-pack
// --stateless-rpc` itself, pushes through `git http-backend`),
// pipelines made from pushes and manual triggers, run scheduling (long-poll
// claims, leases and their sweeper), step logs as files, and encrypted
// secrets. What one client can hold of it (connections, the time a
// header, a body or an unread answer may take) is bounded by
// Config.Limits: conns.go and limits.go. Everything persistent goes
// through Config.Store or the data directory. The store is handed in,
// opened by the caller (knotless-server chooses SQLite or PostgreSQL with
// --database), who closes it after Close; the server knows it as a
// store.Store, and as a store.Coordinator when replicas may share it.
//
//	DIR/knotless.db          the SQLite database (+ -wal, -shm), mode 0600, when knotless-server
//	                         opens one (DBFile); with PostgreSQL (--database) replicas share DIR
//	DIR/logs/<run>/<step>.log step logs; a log's size is its file's size
//	DIR/outputs/<run>/outputs.tar a run's outputs archive (<sha256>-<size>.part while it arrives);
//	                         it goes with its run (no run is deleted yet)
//	DIR/repos/<owner>/<name>.git bare repositories (refs/knotless/* hidden: heldcommits.go)
//	DIR/tmp/                 pushes spooled whole before their repository's lock (emptied at start);
//	                         with replicas DIR/tmp/<replica>/, each its own (replicas.go)
//	DIR/secret.key           32 random bytes: AES-256-GCM key of secrets, 0600
//	DIR/server.key           P-256 private key (multibase); the server DID is its did:key, 0600
//	DIR/oidc-keys.json       RSA keys signing the runs' id tokens (the current one first, retired
//	                         ones while published), 0600; rotated by `knotless-server oidc-keys rotate`
//	DIR/admin.token          the admin account's API token (first start), 0600
//	DIR/server.url           the URL a running knotless-server answers at (written by its main;
//	                         not with replicas)
//	DIR/.lock                flocked by the one server using DIR (shared by replicas), from New
//	                         to Close; holds its PID (not with replicas)
//
// It is also an OpenID Connect issuer at its URL (idtokens.go,
// internal/oidc): /.well-known/openid-configuration, the JWKS, and id
// tokens for the steps of a run, asked by the runner that holds it.
//
// It must never log, return or store in plaintext an API token, a run token
// or a secret value, and never log or store an id token; and it never dials a runner: runners come to it.
package server
