package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a Fatalf instead of ending the test, so that the timeout
// path can be checked.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Logf(string, ...any)            {}
func (f *fakeT) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...); panic(f) }

func run(f *fakeT, fn func()) {
	defer func() {
		if r := recover(); r != nil && r != f {
			panic(r)
		}
	}()
	fn()
}

func TestFor_ReturnsOnceTheConditionHoldsWithoutWaitingTheDeadline(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	For(t, time.Minute, "three checks", func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Fatalf("cond checked %d times, want 3", n.Load())
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %s for a condition true on the third check", d)
	}
}

func TestUntil_TimeoutFailsNamingWhatAndTheLastSeen(t *testing.T) {
	f := &fakeT{TB: t}
	run(f, func() {
		Until(f, 30*time.Millisecond, "the moon", func() (bool, string) { return false, "only stars" })
	})
	if !strings.Contains(f.failed, "waiting for the moon") || !strings.Contains(f.failed, "last seen: only stars") {
		t.Fatalf("failure = %q, want what was awaited and the last seen", f.failed)
	}
}

func TestReceive_ReturnsTheValueOrFailsNamingWhatAfterTheDeadline(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if v := Receive(t, ch, time.Second, "seven"); v != 7 {
		t.Fatalf("Receive = %d, want 7", v)
	}
	f := &fakeT{TB: t}
	run(f, func() { Receive(f, make(chan int), 20*time.Millisecond, "the exit code") })
	if !strings.Contains(f.failed, "the exit code") {
		t.Fatalf("failure = %q, want it to name what was awaited", f.failed)
	}
}

func TestUntilEvery_ChecksNoMoreOftenThanAsked(t *testing.T) {
	f := &fakeT{TB: t}
	var n atomic.Int32
	run(f, func() {
		UntilEvery(f, 250*time.Millisecond, 100*time.Millisecond, "never", func() (bool, string) { n.Add(1); return false, "" })
	})
	if f.failed == "" {
		t.Fatal("a condition that never holds did not fail the test")
	}
	if got := n.Load(); got < 2 || got > 4 {
		t.Fatalf("checked %d times in 250 ms every 100 ms, want 3 (2–4)", got)
	}
}
