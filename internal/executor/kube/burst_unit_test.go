package kube

import (
	"testing"
	"time"
)

// TestNextSandboxPoll_APodStartingFor100sHasItsEventsReadSevenTimesNotThirtyFour:
// waitRunning reads a scheduled, not yet running pod's events (to find a
// sandbox the runtime cannot make) a second after creating it, then after
// sandboxPoll, each wait doubling up to sandboxPollMax. The failure it
// pins: a fixed 3 s poll made a burst of 100 job pods that took ~100 s to
// start list events 26 times a run (2,641 of the runner's 2,941 API
// requests in that burst), a third of the default --kube-api-qps. The
// first two reads stay at 1 s and 4 s (a missing RuntimeClass handler is
// found as fast as before) and no wait passes sandboxPollMax (a failure
// past sandboxGrace is seen at most that much later).
func TestNextSandboxPoll_APodStartingFor100sHasItsEventsReadSevenTimesNotThirtyFour(t *testing.T) {
	var reads []time.Duration
	at, every := time.Second, time.Duration(0)
	for at <= 100*time.Second {
		reads = append(reads, at)
		every = max(sandboxPoll, nextSandboxPoll(every))
		if every > sandboxPollMax {
			t.Fatalf("a wait of %s between two reads, over sandboxPollMax %s", every, sandboxPollMax)
		}
		at += every
	}
	if len(reads) < 2 || reads[0] != time.Second || reads[1] != 4*time.Second {
		t.Errorf("reads at %v, want the first two at 1s and 4s", reads)
	}
	if len(reads) != 7 {
		t.Errorf("%d reads in 100 s (%v), want 7", len(reads), reads)
	}
	if sandboxPollMax > sandboxGrace/2 {
		t.Errorf("sandboxPollMax %s is over half of sandboxGrace %s", sandboxPollMax, sandboxGrace)
	}
}
