// Package api is the wire contract between knotless-server, knotless-run and
// the knotless CLI: the XRPC method names (NSIDs under dev.knotless.*), their
// request and response types, the error shape, and a small XRPC client.
//
// XRPC conventions (https://atproto.com/specs/xrpc): queries are HTTP GET
// with parameters in the query string, procedures are HTTP POST with a JSON
// body (or a binary body where noted), both under /xrpc/<NSID>. Errors are a
// JSON object {"error": Name, "message": text} with a 4xx/5xx status.
//
// This package must never import server, runner or store code: everything
// here is shared by all three programs.
package api
