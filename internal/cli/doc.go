// Package cli is the `knotless` command: the user's client of a Knotless
// server (login, accounts, repositories, runs and their logs, secrets,
// runners) plus `workflow lint`, which needs no server.
//
// Everything goes through the XRPC contract in internal/api; the package
// never touches server storage. Each command is an options type (its flags
// as fields) with kubectl's complete, validate and run (options.go); its
// cobra constructor only binds flags to those fields, so a test calls a
// command's options without cobra. Main and App.Run take their streams and
// environment as arguments, so tests run the whole CLI in-process with
// buffers.
//
// It must never take a secret or a token from a command-line argument, print
// a secret value, or print the API token except once when an account is made.
package cli
