// Package testenv turns a test's skip for something this machine lacks
// into a failure where the machine is known to have it. Only for tests.
//
// A skip passes silently under `go test` without -v: on CI, where the
// machine is root, mounts tmpfs and bind mounts, makes network namespaces
// and pseudo-terminals, has cgroup v2's unified hierarchy, /proc, bash,
// dash, base64 and Go at /usr/local/go, such a skip would be a test that
// passed without proving anything. `make test` sets MachineRequired; the
// skips that remain (no cluster or engine outside CI, a harness without a
// capability, -short, a RuntimeClass without user namespaces) are counted
// by reason at the end of its output (scripts/testreport). What a test can
// bring about itself it does instead of skipping: Tmpfs mounts a file
// system that punches holes, OtherFileSystem finds or mounts a second one.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
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

// LookPath returns the path of the command name, or Skipf's the test
// naming the Debian package that has it (.ci/run installs those CI lacks).
func LookPath(t testing.TB, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Skipf(t, "no %s in PATH (apt-get install %s)", name, debianPackage)
	}
	return path
}
