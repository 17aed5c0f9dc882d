package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recorder notes whether Skip or Fatalf was called, instead of ending the
// test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skip(args ...any)               { r.skipped = args[0].(string) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestSkipf_SkipsUnlessTheMachineIsRequiredThenFails(t *testing.T) {
	t.Setenv(MachineRequired, "")
	r := &recorder{TB: t}
	Skipf(r, "no %s here", "pty")
	if r.skipped != "no pty here" || r.failed != "" {
		t.Fatalf("without %s: skipped %q, failed %q; want a skip", MachineRequired, r.skipped, r.failed)
	}
	t.Setenv(MachineRequired, "1")
	r = &recorder{TB: t}
	Skipf(r, "no %s here", "pty")
	if r.skipped != "" || !strings.Contains(r.failed, MachineRequired) {
		t.Fatalf("with %s=1: skipped %q, failed %q; want a failure", MachineRequired, r.skipped, r.failed)
	}
}
