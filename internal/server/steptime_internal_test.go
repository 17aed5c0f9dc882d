package server

import (
	"testing"
	"time"
)

// A runner's clock ahead of the server's (or far behind it) must not make
// a step end before it started or last for days: such times count as the
// server's now.
func TestStepTime_RunnerClockAheadOrFarBehindCountsAsNow(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	earlier := now.Add(-90 * time.Second)
	for _, c := range []struct {
		at   *time.Time
		want time.Time
	}{
		{nil, now},
		{&earlier, earlier},
		{ptrTime(now.Add(time.Minute)), now},
		{ptrTime(now.Add(-25 * time.Hour)), now},
	} {
		if got := stepTime(c.at, now); !got.Equal(c.want) {
			t.Errorf("stepTime(%v) = %v, want %v", c.at, got, c.want)
		}
	}
}

func ptrTime(t time.Time) *time.Time { return &t }
