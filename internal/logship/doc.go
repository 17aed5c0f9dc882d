// Package logship gets what a run produces from the runner to the server:
// the on-disk Spool a run is recorded into (step logs, the outputs archive,
// a journal of step updates ending with the result) and the Shipper that
// delivers a spool through the runner's server client (api.RunnerClient)
// and removes it once the server acknowledged the result.
//
// It knows nothing of workflows, executors or the claim loop; the runner
// drives it. It must never drop a spooled byte or entry without a log line
// saying so, never resend a log byte the server already holds (appends go
// by offset), never deliver a result before the logs and updates written
// before it, and never log a request's body (it may hold a step's output).
package logship
