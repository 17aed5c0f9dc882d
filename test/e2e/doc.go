// Package e2e runs the built programs (knotless-server, knotless-run and the
// knotless CLI) as real processes against each other, with real git, real
// HTTP and real signals, and checks the claims only a process-level test can
// prove: what a SIGKILL, a SIGTERM or a server restart does to a run, what
// every process's command line holds while a secret is in use, and that the
// README's demo and the guides in docs/ work as written.
//
// Its tests build the programs once (TestMain) into a temporary directory;
// they never use bin/ and never touch anything outside t.TempDir() except the
// demo, which pushes this repository's HEAD to a throwaway server. Every
// process a test starts is killed when the test ends, also on failure.
package e2e
