// Package shell is the shell executor: it runs a run's steps as processes on
// the runner's own host, in the checkout, one process group per step. It
// offers no isolation, so it is for trusted repositories only, and it says so
// in every run's setup log.
//
// Each step's script is written to a private file (mode 0700) in the
// session's directory and handed to the step's shell as a path; the script
// and the secrets never appear in any process's argv. A step's environment is
// exactly the variables and secrets it was given, plus PATH and HOME when the
// step has none; nothing of the runner's own environment leaks in.
//
// It must never leave a step's process group running after Exec returns,
// never put a secret anywhere but the step's own environment, and never read
// or write files outside the paths it was handed. It is Linux-only (process
// groups, waitid, /proc).
package shell
