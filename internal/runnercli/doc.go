// Package runnercli is the `knotless-run` command: `login` registers a
// runner identity with a server, `run` claims and executes runs, `exec` runs
// one workflow locally with no server. It turns flags (with KNOTLESS_*
// environment fallbacks) into calls of internal/runner; all of the work is
// there. Each executor adds its own flags through executor.Options, so a new
// executor costs this package one line.
//
// Main takes its arguments and streams as parameters, so tests run the
// whole program in-process or, for signals, as a child process. It must
// never take a secret from a command-line argument or print one.
package runnercli
