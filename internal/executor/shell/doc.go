// Package shell is the shell executor: it runs a run's steps as processes on
// the runner's own host, in the checkout. It offers no isolation, so it is
// for trusted repositories only, and it says so in every run's setup log.
//
// Each run gets a step agent (knotless-agent serve, internal/stepagent) in
// its session directory, started detached from the runner (its own session,
// no death signal, a minimal environment), reached over a Unix socket there.
// The agent starts each step in its own process group with its output in a
// file, kills everything the step started when it ends (child subreaper,
// and a cgroup v2 per step where one is delegated), and keeps going while
// the runner restarts: Recover re-attaches by the session directory the
// Handle names, and Sweep shuts down agents nobody recovered.
//
// Each step's script is written to a private file (mode 0700) in the
// session directory and handed to the step's shell as a path; the script
// and the secrets never appear in any process's argv, and secrets reach the
// agent only over its socket, for the step's execve. A step's environment is
// exactly the variables and secrets it was given, plus PATH, HOME and
// TMPDIR (the session directory's home and tmp, fresh for each run and
// removed with it) when the step has none; nothing of the runner's own
// environment leaks in.
//
// It must never leave a step's process running after Exec returns, never
// put a secret anywhere but the step's own environment, and never read or
// write files outside the paths it was handed. It is Linux-only (process
// groups, subreapers, /proc).
package shell
