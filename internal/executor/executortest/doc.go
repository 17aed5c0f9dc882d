// Package executortest is the behavioural suite every executor.Executor
// must pass: one scenario per failure it pins (exit codes, output order and
// bytes, a clean and byte-exact environment, scripts and secrets kept out of
// argv, timeout and cancel killing the whole process group, background
// processes, cleanup during a step, copying files in and out).
//
// An executor's test calls Run with a function that prepares a fresh
// session; the Env it returns says how the suite can look at processes and
// hold a step at a gate, and scenarios that need what an Env lacks are
// skipped, never passed silently.
//
// It is test support: it imports "testing" and must never be imported by
// non-test code.
package executortest
