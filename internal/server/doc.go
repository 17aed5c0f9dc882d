// Package server is knotless-server: the XRPC API under /xrpc/<NSID>, git
// smart HTTP hosting at /OWNER/NAME.git (through `git http-backend`),
// pipelines made from pushes and manual triggers, run scheduling (long-poll
// claims, leases and their sweeper), step logs as files, and encrypted
// secrets. Everything persistent goes through store.Store or the data
// directory (see Config.DataDir for its layout).
//
// It must never log, return or store in plaintext an API token, a run token
// or a secret value; and it never dials a runner: runners come to it.
package server
