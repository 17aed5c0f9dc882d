// Package runner is the core of knotless-run: the runner's state file and
// registration (login), the claim loop with its heartbeats and capacity, the
// bare git mirrors and per-run checkouts, the execution of a workflow's steps
// through an executor.Executor (shared by `run` and the server-less `exec`).
// Each run is recorded into a logship.Spool, from which a logship.Shipper
// delivers logs, step updates and the result; the claim loop's calls (claim,
// heartbeat) go through api.RunnerClient too.
//
// It knows executors only through the executor package's interfaces, so
// docker and kube fit without touching it. It must never let a byte of step
// output leave the runner unmasked, never put a secret or the run token in a
// command line, a URL or a log, never drop a log byte or a result without a
// visible marker, and never leave a workspace behind.
//
// A run's phases are execution.run's (phases.go): begin, parse, session
// (the environment, prepared or recovered), steps, afterSteps, release and
// Execute's report. What earlier processes did of the run is a history;
// whether the run was handed over is the cause of the execution's hold
// context (errHandedOver), asked through execution.handedOver.
//
// Runs outlive the process: the journal records what was claimed and the
// environment's handle, and each step log a checkpoint of how far into the
// step's raw output it got. A runner that starts asks the server which runs
// it holds and takes those over (takeover.go): it recovers their
// environments and resumes each running step's log at its checkpoint. On
// Handover it lets go of every environment and exits, for its successor.
//
// Work directory layout (--work DIR):
//
//	DIR/.lock                        flock held by the one runner process using DIR
//	DIR/mirrors/OWNER/NAME.git       bare mirror per repository (the run's commit
//	                                 fetched by SHA; branches and tags kept up to date)
//	DIR/mirrors/.external/<hash>.git mirror of a submodule on another host
//	DIR/workspaces/OWNER/NAME/WORKFLOW/SLOT
//	                                 the run's checkout, at a stable path per
//	                                 repository and workflow (slots.go; emptied
//	                                 before and after each run)
//	DIR/runs/<run>/outputs           the workflow's outputs, copied out of the
//	                                 environment to be packed (removed once packed)
//	DIR/spool/<run>/                 the run's spool: its logs, their lines' times,
//	                                 checkpoints, journal, outputs archive and
//	                                 delivery cursor (logship.Spool lists the files)
//	DIR/caches/                      the cache store (package cache): entries by
//	                                 repository and key, bounded by --cache-size
//	DIR/shell/run-<run>/             the shell executor's session: the step
//	                                 agent's socket, log and state (scripts,
//	                                 output) and the steps' HOME and TMPDIR
//	                                 (removed after the run)
//
// A spool is removed once the server acknowledged the run's result; a
// runner that starts delivers every spool an earlier process left, takes
// over the runs the server says it still holds, and removes every other
// DIR/runs/*, DIR/workspaces/* and executor environment an earlier process
// left.
package runner
