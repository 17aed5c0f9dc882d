// Package runlog renders a run's logs for people: the lines that frame each
// step's output (header, footer) and the run's summary line. `knotless run
// logs` and `knotless-run exec` both use it, so a run looks the same on a
// server and locally.
//
// It only formats: it never alters a step's bytes, never reads a log, and
// never prints anything itself.
package runlog
