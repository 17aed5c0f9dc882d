package e2e

import (
	"regexp"
	"testing"
)

// runnerMarker matches the marker lines the runner puts into a step's log
// where the step's output went on after a runner restart or a dropped
// stream to the step agent (runner.RestartMarker, ReconnectMarker).
var runnerMarker = regexp.MustCompile(`(?m)^\[knotless: (the runner restarted|the connection to the step agent dropped)[^\n]*\]\n`)

// withoutMarkers returns a step's log without the runner's restart and
// reconnect marker lines, failing the test unless it had exactly want
// restart markers (want < 0: any number).
func withoutMarkers(t testing.TB, log string, restarts int) string {
	t.Helper()
	n := 0
	for _, m := range runnerMarker.FindAllStringSubmatch(log, -1) {
		if m[1] == "the runner restarted" {
			n++
		}
	}
	if restarts >= 0 && n != restarts {
		t.Fatalf("the step log has %d restart marker lines, want %d:\n%s", n, restarts, log)
	}
	return runnerMarker.ReplaceAllString(log, "")
}
