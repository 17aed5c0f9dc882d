package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testenv"
	"knotless.dev/knotless/internal/testwait"
)

// Helpers of the docker-specific tests. Every wait is bounded; every
// container is removed by the session's Cleanup and the fixture's sweep.

var idSeq atomic.Int64

func runID(what string) string {
	return what + "-" + time.Now().Format("150405") + "-" + fmtInt(idSeq.Add(1))
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// testLog collects a run's setup log and passes it to t.Log.
type testLog struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	l.t.Logf("[setup] %s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (f *fixture) spec(t testing.TB, id string) (executor.Spec, *testLog) {
	l := &testLog{t: t}
	return executor.Spec{ID: id, Workspace: t.TempDir(), Timeout: 10 * time.Minute, Log: l}, l
}

// prepare makes a session (within 2 minutes) and cleans it up when the
// test ends.
func (f *fixture) prepare(t testing.TB, e *docker.Executor, spec executor.Spec) executor.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := e.Prepare(ctx, spec)
	if err != nil {
		t.Fatalf("prepare %s: %v", spec.ID, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Cleanup(ctx); err != nil {
			t.Errorf("cleanup %s: %v", spec.ID, err)
		}
	})
	return s
}

// runStep runs step in s, bounded by d.
func runStep(t testing.TB, s executor.Session, step executor.Step, d time.Duration) (executor.Result, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out syncbuf.Buffer
	res, err := s.Exec(ctx, step, &out)
	return res, out.Bytes(), err
}

// stepEnd is what a step's Exec returned.
type stepEnd struct {
	res executor.Result
	err error
}

// startStep runs step in the background and returns once its output holds
// "started" (its script must echo that first): the test then acts on a
// running step, never after a fixed sleep. done receives what Exec
// returned.
func startStep(t *testing.T, ctx context.Context, s executor.Session, step executor.Step) (*syncbuf.Buffer, <-chan stepEnd) {
	t.Helper()
	out := &syncbuf.Buffer{}
	done := make(chan stepEnd, 1)
	go func() {
		res, err := s.Exec(ctx, step, out)
		done <- stepEnd{res, err}
	}()
	testwait.Until(t, time.Minute, "step "+step.ID+" to start", func() (bool, string) {
		return bytes.Contains(out.Bytes(), []byte("started\n")), fmt.Sprintf("output %q", out.Bytes())
	})
	return out, done
}

// TestDocker_OOMKilledStepIsOOM: a step that allocates past --memory is
// killed by the kernel and ends oom-killed (not exit-code, not success),
// and the next step still runs.
func TestDocker_OOMKilledStepIsOOM(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Memory = 64 << 20
	e := f.executor(t, cfg)
	spec, _ := f.spec(t, runID("oom"))
	s := f.prepare(t, e, spec)
	// 200 MiB into a shell variable: more than the container's 64 MiB.
	res, out, err := runStep(t, s, executor.Step{ID: "1", Name: "oom", Script: "x=$(head -c 209715200 /dev/zero | tr '\\0' a); echo survived ${#x}\n"}, 2*time.Minute)
	if err != nil {
		t.Fatalf("exec: %v (output %q)", err, out)
	}
	if res.Reason != api.ReasonOOMKilled {
		t.Fatalf("result %+v, want reason %s (output %q)", res, api.ReasonOOMKilled, out)
	}
	res, out, err = runStep(t, s, executor.Step{ID: "2", Name: "after", Script: "echo still here\n"}, time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "still here\n" {
		t.Fatalf("the step after an OOM: %+v, %v, %q", res, err, out)
	}
}

// TestDocker_StepTimeoutAndRunDeadline: a step past its timeout ends
// timeout; a run past its Spec.Timeout ends its running step timeout,
// enforced in the container by the agent.
func TestDocker_StepTimeoutAndRunDeadline(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("timeout"))
	spec.Timeout = 20 * time.Second
	s := f.prepare(t, e, spec)
	res, _, err := runStep(t, s, executor.Step{ID: "1", Script: "sleep 300\n", Timeout: 2 * time.Second, Grace: time.Second}, time.Minute)
	if err != nil || res.Reason != api.ReasonTimeout {
		t.Fatalf("step timeout: %+v, %v", res, err)
	}
	res, _, err = runStep(t, s, executor.Step{ID: "2", Script: "sleep 300\n", Grace: time.Second}, time.Minute)
	if err != nil || res.Reason != api.ReasonTimeout {
		t.Fatalf("run deadline: %+v, %v", res, err)
	}
}

// TestDocker_CancelAndExitCodes: exit codes are kept as they are; a
// cancelled context ends the step cancelled.
func TestDocker_CancelAndExitCodes(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("codes"))
	s := f.prepare(t, e, spec)
	for i, code := range []int{0, 1, 42, 255} {
		res, _, err := runStep(t, s, executor.Step{ID: fmtInt(int64(i + 1)), Script: "exit " + fmtInt(int64(code)) + "\n"}, time.Minute)
		if err != nil || res.ExitCode != code || res.Reason != "" {
			t.Fatalf("exit %d: %+v, %v", code, res, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, done := startStep(t, ctx, s, executor.Step{ID: "9", Script: "echo started; sleep 300\n", Grace: time.Second})
	cancel()
	if e := testwait.Receive(t, done, time.Minute, "the step to end"); e.err != nil || e.res.Reason != api.ReasonCancelled {
		t.Fatalf("cancel: %+v, %v", e.res, e.err)
	}
}

// TestDocker_ForkBombContainedByPidsAndReported: a fork bomb hits
// --pids, the step fails, its Note names the limit, and the container
// still serves the next step.
func TestDocker_ForkBombContainedByPidsAndReported(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Pids = 64
	e := f.executor(t, cfg)
	spec, _ := f.spec(t, runID("forkbomb"))
	s := f.prepare(t, e, spec)
	bomb := "b() { b | b & }; b & sleep 5; n=$(ls /proc | grep -c '^[0-9]'); echo procs $n; exit 7\n"
	res, out, err := runStep(t, s, executor.Step{ID: "1", Shell: []string{"/bin/sh"}, Script: bomb, Grace: time.Second}, 2*time.Minute)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if res.ExitCode == 0 {
		t.Fatalf("the fork bomb's step succeeded: %+v", res)
	}
	if !strings.Contains(res.Note, "process limit (--pids 64)") {
		t.Errorf("note %q does not report the process limit (output %q)", res.Note, clip(out))
	}
	res, out, err = runStep(t, s, executor.Step{ID: "2", Script: "echo alive\n"}, time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "alive\n" {
		t.Fatalf("after the fork bomb: %+v, %v, %q", res, err, out)
	}
}

func clip(b []byte) []byte {
	if len(b) > 400 {
		return b[len(b)-400:]
	}
	return b
}

// TestDocker_ImageMissingIsImagePull: an image that is not on the engine
// and cannot be pulled ends Prepare with a Fault image-pull carrying the
// engine's message, and leaves no container.
func TestDocker_ImageMissingIsImagePull(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("noimage"))
	spec.Image = "localhost/knotless/missing:1"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := e.Prepare(ctx, spec)
	if err == nil {
		_ = s.Cleanup(ctx)
		t.Fatal("Prepare succeeded with a missing image")
	}
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonImagePull || !strings.Contains(fault.Message, "localhost/knotless/missing:1") {
		t.Fatalf("error %v, want a Fault image-pull naming the image", err)
	}
	if left := f.leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestDocker_ContainerRemovedUnderAStepIsErrored: a container removed
// from outside while a step runs ends the step errored (executor), never
// a success.
func TestDocker_ContainerRemovedUnderAStepIsErrored(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("gone"))
	s := f.prepare(t, e, spec)
	id := containerOf(t, s)
	_, done := startStep(t, context.Background(), s, executor.Step{ID: "1", Script: "echo started; sleep 300\n"})
	if err := f.eng.Client.ContainerRemove(context.Background(), id, containerRemoveForce); err != nil {
		t.Fatal(err)
	}
	if e := testwait.Receive(t, done, 2*time.Minute, "the step to end"); e.err == nil && (e.res.Reason == "" || !executor.EnvironmentFault(e.res.Reason)) {
		t.Fatalf("result %+v: a removed container must end the step errored", e.res)
	}
}

// TestDocker_DiskFloorHoldsARunBackThenLetsItStart: with less free space
// than --disk-floor the run waits and its log says why; when space
// returns, it starts. The free space is a real small file system (a
// tmpfs of the test's own) filled and emptied by the test.
func TestDocker_DiskFloorHoldsARunBackThenLetsItStart(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	if err := mountTmpfs(dir, 8<<20); err != nil {
		testenv.Skipf(t, "cannot mount a small tmpfs (not root?): %v", err)
	}
	t.Cleanup(func() { _ = unmount(dir) })
	fill := filepath.Join(dir, "fill")
	if err := os.WriteFile(fill, make([]byte, 6<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := f.config()
	cfg.DiskFloor = 4 << 20
	cfg.DiskPoll = 100 * time.Millisecond
	cfg.FreeSpace = func(ctx context.Context) (uint64, string, error) { return statfsFree(dir) }
	e := f.executor(t, cfg)
	spec, log := f.spec(t, runID("floor"))
	done := make(chan error, 1)
	var s executor.Session
	go func() {
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err = e.Prepare(ctx, spec)
		done <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(log.String(), "less than --disk-floor") {
		if time.Now().After(deadline) {
			t.Fatalf("the run's log never said it waits for disk space: %q", log.String())
		}
		select {
		case err := <-done:
			t.Fatalf("Prepare ended (%v) while the disk was below the floor", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if left := f.leftovers(t, spec.ID); len(left) > 0 {
		t.Fatalf("a container exists while the run waits: %v", left)
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Prepare after space returned: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the run did not start within a minute of space returning")
	}
	t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	if !strings.Contains(log.String(), "free again") {
		t.Errorf("the log does not say the run starts: %q", log.String())
	}
	res, out, err := runStep(t, s, executor.Step{ID: "1", Script: "echo started\n"}, time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "started\n" {
		t.Fatalf("step: %+v, %v, %q", res, err, out)
	}
}

// TestDocker_UnknownRuntimeIsRefusedAndNetworkNoneHasOnlyLoopback: a
// --runtime the engine lacks ends Prepare errored (executor) with the
// engine's message and leaves nothing; --network none gives a container
// with loopback only; --network host is refused.
func TestDocker_UnknownRuntimeIsRefusedAndNetworkNoneHasOnlyLoopback(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Runtime = "no-such-runtime"
	spec, _ := f.spec(t, runID("runtime"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := f.executor(t, cfg).Prepare(ctx, spec)
	var fault *executor.Fault
	if err == nil {
		_ = s.Cleanup(ctx)
		t.Fatal("Prepare succeeded with an unknown runtime")
	} else if !errors.As(err, &fault) || fault.Reason != api.ReasonExecutor || !strings.Contains(fault.Message, "no-such-runtime") {
		t.Errorf("error %v, want a Fault executor naming the runtime", err)
	}
	if left := f.leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}

	cfg = f.config()
	cfg.Network = "none"
	spec, _ = f.spec(t, runID("nonet"))
	s = f.prepare(t, f.executor(t, cfg), spec)
	res, out, err := runStep(t, s, executor.Step{ID: "1", Script: "ls /sys/class/net\n"}, time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "lo\n" {
		t.Errorf("--network none: %+v, %v, interfaces %q", res, err, out)
	}

	for _, n := range []string{"host", "container:" + containerOf(t, s)} {
		cfg.Network = n
		if _, err := docker.New(cfg); err == nil || !strings.Contains(err.Error(), "never share") {
			t.Errorf("--network %s: %v, want it refused", n, err)
		}
	}
}

// TestDocker_ContainerStoppedFromOutsideIsErroredNotCancelled: `docker
// stop` sends the agent (PID 1) SIGTERM, and the agent stops the running
// step as cancelled; nobody cancelled it, so the step ends errored
// (executor) with the container's state, never cancelled nor a success.
func TestDocker_ContainerStoppedFromOutsideIsErroredNotCancelled(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("stopped"))
	s := f.prepare(t, e, spec)
	id := containerOf(t, s)
	out, done := startStep(t, context.Background(), s, executor.Step{ID: "1", Script: "echo started; sleep 300\n", Grace: time.Second})
	if err := f.eng.Client.ContainerStop(context.Background(), id, container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	end := testwait.Receive(t, done, 2*time.Minute, "the step to end")
	if end.err != nil {
		t.Fatalf("exec: %v (output %q)", end.err, out.Bytes())
	}
	if end.res.Reason != api.ReasonExecutor || !strings.Contains(end.res.Note, "exited") {
		t.Fatalf("result %+v, want errored/executor saying the container exited", end.res)
	}
}

// TestDocker_ExecContainerGoesWhenNoRunnerIsConnected: a container of
// `knotless-run exec` (Ephemeral) whose process died (here: the session
// detached, no client any more) ends its step, its agent exits after
// OrphanAfter, and the engine removes the container: nothing is left
// running after a killed exec.
func TestDocker_ExecContainerGoesWhenNoRunnerIsConnected(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Ephemeral, cfg.OrphanAfter = true, 2*time.Second
	e := f.executor(t, cfg)
	spec, _ := f.spec(t, runID("orphan"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := e.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, done := startStep(t, ctx, s, executor.Step{ID: "1", Script: "echo started; sleep 300\n"})
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	testwait.Receive(t, done, time.Minute, "the step to end")
	testwait.Until(t, time.Minute, "the exec's container to go after its runner went", func() (bool, string) {
		left := f.leftovers(t, spec.ID)
		return len(left) == 0, fmt.Sprint(left)
	})
}
