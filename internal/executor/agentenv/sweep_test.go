package agentenv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/syncbuf"
)

// listDriver is a Driver that only lists: its environments' Remove is
// remove(i). Sweep's scheduling is pure logic; a real driver adds only
// its removal's own time.
type listDriver struct {
	n      int
	remove func(ctx context.Context, i int) error
	after  func(i int) bool // Listed.After of entry i; nil: none
}

func (d *listDriver) Make(context.Context, executor.Spec, agent.Serve) (*agentenv.Env, error) {
	return nil, errors.New("listDriver makes nothing")
}

func (d *listDriver) Open(context.Context, string, json.RawMessage) (*agentenv.Env, error) {
	return nil, executor.ErrNotRecoverable
}

func (d *listDriver) List(context.Context) ([]agentenv.Listed, error) {
	out := make([]agentenv.Listed, d.n)
	for i := range out {
		out[i] = agentenv.Listed{ID: fmt.Sprintf("run-%d", i), Name: fmt.Sprintf("env %d", i),
			Remove: func(ctx context.Context) error { return d.remove(ctx, i) }, After: d.after != nil && d.after(i)}
	}
	return out, nil
}

// removals counts Observer.EnvironmentRemoved calls.
type removals struct{ n atomic.Int64 }

func (r *removals) EnvironmentMade(string)    {}
func (r *removals) EnvironmentRemoved(string) { r.n.Add(1) }
func (r *removals) AgentReconnected(string)   {}

// sweepBase is a Base over d whose log lines go to log and whose
// removals obs counts.
func sweepBase(d agentenv.Driver, log *syncbuf.Buffer, obs *removals) *agentenv.Base {
	cfg := agentenv.Config{Logger: slog.New(slog.NewTextHandler(log, nil)), Observer: obs}.Defaults()
	return agentenv.NewBase("list", d, cfg, nil)
}

// TestBase_SweepRemovesUpToSweepAtOnceEnvironmentsAtOnce: a sweep of many
// leftovers has SweepAtOnce removals under way at once, never more, and
// still logs and observes each one. Each Remove waits (up to 5 s in all)
// until SweepAtOnce are under way: removals one after another never get
// there.
func TestBase_SweepRemovesUpToSweepAtOnceEnvironmentsAtOnce(t *testing.T) {
	const n = 3*agentenv.SweepAtOnce + 5
	var mu sync.Mutex
	inFlight, most := 0, 0
	full := make(chan struct{})
	deadline := make(chan struct{})
	defer time.AfterFunc(5*time.Second, func() { close(deadline) }).Stop()
	removed := make([]bool, n)
	d := &listDriver{n: n, remove: func(ctx context.Context, i int) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == agentenv.SweepAtOnce {
			select {
			case <-full:
			default:
				close(full)
			}
		}
		mu.Unlock()
		select {
		case <-full:
		case <-deadline:
		}
		mu.Lock()
		inFlight--
		removed[i] = true
		mu.Unlock()
		return nil
	}}
	var log syncbuf.Buffer
	obs := &removals{}
	start := time.Now()
	if err := sweepBase(d, &log, obs).Sweep(context.Background(), nil); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	t.Logf("%d removals in %s, at most %d at once", n, time.Since(start).Round(time.Millisecond), most)
	if most != agentenv.SweepAtOnce {
		t.Errorf("at most %d removals at once, want %d (SweepAtOnce)", most, agentenv.SweepAtOnce)
	}
	for i, ok := range removed {
		if !ok {
			t.Errorf("environment %d not removed", i)
		}
	}
	if got := obs.n.Load(); got != n {
		t.Errorf("Observer told of %d removals, want %d", got, n)
	}
	if got := strings.Count(log.String(), "removed an environment no run of this runner holds"); got != n {
		t.Errorf("%d removal log lines, want %d:\n%s", got, n, log.String())
	}
}

// TestBase_SweepJoinsEachFailedRemovalAndRemovesTheRest: removals that
// fail do not stop the others; each failure is in the error, naming its
// environment, in List's order; the kept one is not removed; only the
// removed ones are logged and observed.
func TestBase_SweepJoinsEachFailedRemovalAndRemovesTheRest(t *testing.T) {
	const n = 40
	var mu sync.Mutex
	removed := map[int]bool{}
	d := &listDriver{n: n, remove: func(_ context.Context, i int) error {
		if i%10 == 3 {
			return fmt.Errorf("no removal %d", i)
		}
		mu.Lock()
		removed[i] = true
		mu.Unlock()
		return nil
	}}
	var log syncbuf.Buffer
	obs := &removals{}
	err := sweepBase(d, &log, obs).Sweep(context.Background(), []string{"run-7"})
	if err == nil {
		t.Fatal("Sweep: no error, want the four failed removals'")
	}
	want := "sweep env 3: no removal 3\nsweep env 13: no removal 13\nsweep env 23: no removal 23\nsweep env 33: no removal 33"
	if err.Error() != want {
		t.Errorf("Sweep's error:\n%s\nwant:\n%s", err, want)
	}
	if removed[7] {
		t.Error("the kept environment was removed")
	}
	if len(removed) != n-5 {
		t.Errorf("%d removed, want %d (all but the kept one and the four that failed)", len(removed), n-5)
	}
	if got := obs.n.Load(); got != n-5 {
		t.Errorf("Observer told of %d removals, want %d", got, n-5)
	}
	if got := strings.Count(log.String(), "removed an environment no run of this runner holds"); got != n-5 {
		t.Errorf("%d removal log lines, want %d", got, n-5)
	}
}

// TestBase_SweepStartsNoRemovalOnceItsContextEnds: when ctx ends during a
// sweep, the removals under way see it, no further one starts, and the
// error says ctx ended.
func TestBase_SweepStartsNoRemovalOnceItsContextEnds(t *testing.T) {
	const n = 10 * agentenv.SweepAtOnce
	var started atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &listDriver{n: n, remove: func(ctx context.Context, i int) error {
		if started.Add(1) == agentenv.SweepAtOnce {
			cancel()
		}
		<-ctx.Done()
		return ctx.Err()
	}}
	var log syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- sweepBase(d, &log, &removals{}).Sweep(ctx, nil) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Sweep still running 10 s after its context ended")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Sweep: %v, want an error wrapping context.Canceled", err)
	}
	if got := started.Load(); got != agentenv.SweepAtOnce {
		t.Errorf("%d removals started, want %d: none after ctx ended", got, agentenv.SweepAtOnce)
	}
}

// TestBase_SweepRemovesTheEntriesMarkedAfterOnceAllTheOthersAreGone: an
// entry marked Listed.After (a Docker builder's volume) starts its removal
// only when every other entry's removal has ended. Pins: with removals at
// once, the docker executor's sweep removed a builder's volume while its
// containers still mounted it ("volume is in use",
// TestDocker_ContainerBuildLeftoversAreSwept in a cold CI run).
func TestBase_SweepRemovesTheEntriesMarkedAfterOnceAllTheOthersAreGone(t *testing.T) {
	const n = 8
	var mu sync.Mutex
	ended, early := 0, 0
	d := &listDriver{n: n, after: func(i int) bool { return i%2 == 0 }, remove: func(_ context.Context, i int) error {
		if i%2 == 0 {
			mu.Lock()
			if ended < n/2 {
				early++
			}
			mu.Unlock()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		ended++
		mu.Unlock()
		return nil
	}}
	var log syncbuf.Buffer
	obs := &removals{}
	if err := sweepBase(d, &log, obs).Sweep(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if early != 0 {
		t.Errorf("%d entries marked After began before the %d others had gone", early, n/2)
	}
	if got := obs.n.Load(); got != n {
		t.Errorf("%d removals observed, want %d", got, n)
	}
}
