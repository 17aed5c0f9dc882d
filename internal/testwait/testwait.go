// Package testwait is how Knotless's tests wait: they poll a condition
// with a deadline and never sleep a fixed time in the hope that something
// happened meanwhile. It is only for tests (it fails a testing.TB).
//
// One helper for every package: For when the condition is a yes or no,
// Until when it can also say what it last saw (the failure then shows it),
// UntilEvery when checking costs (an exec into a pod, a kubectl call),
// Receive for a value a goroutine sends when it is done.
package testwait

import (
	"testing"
	"time"
)

// MaxInterval is the longest pause between two checks of For and Until:
// they check at once, then after 1 ms, doubling up to MaxInterval, so a
// condition that holds quickly is seen quickly and a slow one costs at most
// 1/MaxInterval checks a second.
const MaxInterval = 20 * time.Millisecond

// For checks cond until it returns true. When d has passed and cond still
// returns false, the test fails ("timed out after D waiting for WHAT").
// Call it from the test's goroutine (it may call t.Fatalf).
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, d, what, func() (bool, string) { return cond(), "" })
}

// Until is For for a condition that also describes what it saw: on a
// timeout the test fails with cond's last description.
func Until(t testing.TB, d time.Duration, what string, cond func() (ok bool, seen string)) {
	t.Helper()
	wait(t, d, 0, what, cond)
}

// UntilEvery is Until checking once every interval (the first check at
// once), for conditions whose check costs (an exec into a pod: poll it
// every second, not every 20 ms). It logs how long the wait took.
func UntilEvery(t testing.TB, d, every time.Duration, what string, cond func() (ok bool, seen string)) {
	t.Helper()
	start := time.Now()
	wait(t, d, every, what, cond)
	t.Logf("%s: after %s", what, time.Since(start).Round(100*time.Millisecond))
}

// Receive waits up to d for a value on ch and returns it; when none came,
// the test fails ("nothing within D: WHAT"). For a goroutine's result (an
// Exec, a process's exit code) instead of a select on time.After.
func Receive[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("nothing within %s: %s", d, what)
		var zero T
		return zero
	}
}

// wait checks cond until it holds; every 0 means a doubling pause from
// 1 ms to MaxInterval.
func wait(t testing.TB, d, every time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	if every > 0 {
		pause = every
	}
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if seen != "" {
				t.Fatalf("timed out after %s waiting for %s (last seen: %s)", d, what, seen)
			}
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(pause)
		if every == 0 {
			pause = min(2*pause, MaxInterval)
		}
	}
}
