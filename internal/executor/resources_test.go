package executor

import (
	"errors"
	"testing"
)

// TestCaps_RefusalNamesEveryValueAsTheWorkflowSpellsIt: a workflow asking
// for more than the runner allows is refused with every value over its
// cap, sizes in the units people write (4Gi, not 4294967296 bytes), the
// same words on every executor.
func TestCaps_RefusalNamesEveryValueAsTheWorkflowSpellsIt(t *testing.T) {
	c := Caps{MilliCPUs: 2000, Memory: 2 << 30, Disk: 10 << 30}
	_, err := c.Resolve(Spec{CPUs: "2500m", MemoryBytes: 4 << 30, DiskBytes: 20 << 30})
	var f *Fault
	if !errors.As(err, &f) || f.Reason != "unsupported" {
		t.Fatalf("err %v, want a Fault with reason unsupported", err)
	}
	want := "the workflow asks for more than this runner allows: cpus 2500m (--cpus 2), memory 4Gi (--memory 2Gi), disk 20Gi (--disk 10Gi)"
	if f.Message != want {
		t.Errorf("message\n got %q\nwant %q", f.Message, want)
	}
	r, err := c.Resolve(Spec{CPUs: "0.5", MemoryBytes: 1000000})
	if err != nil || r != (Resources{MilliCPUs: 500, Memory: 1000000, Disk: 10 << 30}) {
		t.Errorf("within the caps: %+v, %v", r, err)
	}
	if r, err := (Caps{MilliCPUs: 1000, Memory: 1 << 30}).Resolve(Spec{DiskBytes: 1 << 40}); err != nil || r.Disk != 0 {
		t.Errorf("no disk cap: %+v, %v (an executor without one ignores disk:)", r, err)
	}
}
