// Package testenv turns a test's skip for something this machine lacks
// into a failure where the machine is known to have it. Only for tests.
//
// A skip passes silently under `go test` without -v: on CI, where the
// machine is root, mounts tmpfs and bind mounts, makes network namespaces
// and pseudo-terminals, has cgroup v2's unified hierarchy, /proc, bash,
// dash, base64 and Go at /usr/local/go, such a skip would be a test that
// passed without proving anything. `make test` sets MachineRequired; the
// skips that remain (no cluster or engine outside CI, a harness without a
// capability, an opt-in like KNOTLESS_TEST_OTHER_FS) are counted by reason
// at the end of its output (scripts/testreport).
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// MachineRequired is the variable that makes Skipf fail: "1" on CI.
const MachineRequired = "KNOTLESS_TEST_MACHINE_REQUIRED"

// Skipf skips t with the message format and args say (what the machine
// lacks, or the condition the test could not bring about). With
// KNOTLESS_TEST_MACHINE_REQUIRED=1 it fails the test with that message
// instead. Call it from the test's goroutine.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(MachineRequired) == "1" {
		t.Fatalf("%s (%s=1: this machine must be able to run this test)", msg, MachineRequired)
		return
	}
	t.Skip(msg)
}
