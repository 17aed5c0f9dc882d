package executortest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/testwait"
)

// lifecycleScenario builds and restarts executors itself.
type lifecycleScenario struct {
	name string
	run  func(t *testing.T, h Harness)
}

var lifecycle = []lifecycleScenario{
	{"PrepareFailureLeavesNothing", testPrepareFailureLeavesNothing},
	{"SweepRemovesOnlyWhatItIsNotToldToKeep", testSweepKeeps},
	{"RecoverResumesOutputAtOffsetNothingLostOrDoubled", testRecoverResumes},
	{"StepEndedWhileDetachedGivesItsTrueResult", testEndedWhileDetached},
	{"RecoverAfterCleanupIsNotRecoverable", testRecoverAfterCleanup},
	{"RecoveredSessionCleanupLeavesNothing", testRecoveredCleanup},
}

// noteUnchecked says loudly that a check could not be made.
func noteUnchecked(t *testing.T, what string) {
	t.Helper()
	t.Logf("NOT CHECKED (the harness cannot observe it): %s", what)
}

func assertNoLeftovers(t *testing.T, h Harness, id, when string) {
	t.Helper()
	if h.Leftovers == nil {
		noteUnchecked(t, "nothing of "+id+" is left "+when)
		return
	}
	var left []string
	deadline := time.Now().Add(pollDeadline)
	for {
		if left = h.Leftovers(t, id); len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s, %s left: %s", when, id, strings.Join(left, "; "))
}

func prepare(t *testing.T, ex executor.Executor, spec executor.Spec) executor.Session {
	t.Helper()
	s, err := ex.Prepare(context.Background(), spec)
	if err != nil {
		t.Fatalf("Prepare %s: %v", spec.ID, err)
	}
	t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	return s
}

func recoverSession(t *testing.T, ex executor.Executor, h executor.Handle) executor.Session {
	t.Helper()
	s, err := ex.Recover(context.Background(), h)
	if err != nil {
		t.Fatalf("Recover %s: %v", h.ID, err)
	}
	t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	return s
}

func testPrepareFailureLeavesNothing(t *testing.T, h Harness) {
	newExecutor := h.Executor(t)
	ex := newExecutor()
	missing := h.Spec(t, "run-missing")
	missing.Workspace = missing.Workspace + "/does-not-exist"
	if s, err := ex.Prepare(context.Background(), missing); err == nil {
		_ = s.Cleanup(context.Background())
		t.Fatalf("Prepare over a missing workspace succeeded")
	}
	assertNoLeftovers(t, h, "run-missing", "after Prepare failed over a missing workspace")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s, err := ex.Prepare(ctx, h.Spec(t, "run-cancelled")); err == nil {
		_ = s.Cleanup(context.Background())
		t.Fatalf("Prepare with a cancelled context succeeded")
	}
	assertNoLeftovers(t, h, "run-cancelled", "after Prepare failed with a cancelled context")

	if s, err := ex.Prepare(context.Background(), h.Spec(t, "../escape")); err == nil {
		_ = s.Cleanup(context.Background())
		t.Fatalf("Prepare with the ID ../escape succeeded")
	}
}

// gatedStep prints "before", waits at gate, prints "after" and exits code.
func gatedStep(id string, g Gate, code int) executor.Step {
	return executor.Step{ID: id, Name: "gated", Script: fmt.Sprintf("echo before\n%s\necho after\nexit %d\n", g.Wait, code)}
}

func testSweepKeeps(t *testing.T, h Harness) {
	newExecutor := h.Executor(t)
	ex := newExecutor()
	keep := prepare(t, ex, h.Spec(t, "run-keep"))
	drop := prepare(t, ex, h.Spec(t, "run-drop"))
	env := h.Env(t, keep)
	if env.NewGate == nil {
		t.Skip("the harness has no gate to hold a step")
	}
	g := env.NewGate(t)
	var out output
	ch := start(context.Background(), keep, gatedStep("1", g, 0), &out)
	out.waitLine(t, "before")
	hk, hd := keep.Handle(), drop.Handle()
	if err := keep.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if r := <-ch; !errors.Is(r.err, executor.ErrDetached) {
		t.Fatalf("Exec during Detach: %+v, %v; want ErrDetached", r.res, r.err)
	}
	if err := drop.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}

	ex = newExecutor() // the runner restarts
	if err := ex.Sweep(context.Background(), []string{"run-keep"}); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	assertNoLeftovers(t, h, "run-drop", "after Sweep without it in keep")
	if s, err := ex.Recover(context.Background(), hd); err == nil {
		_ = s.Cleanup(context.Background())
		t.Errorf("Recover of a swept environment succeeded")
	} else if !errors.Is(err, executor.ErrNotRecoverable) {
		t.Errorf("Recover of a swept environment: %v, want ErrNotRecoverable", err)
	}
	s := recoverSession(t, ex, hk)
	var rest output
	ch = start(context.Background(), s, executor.Step{ID: "1", Offset: int64(len("before\n"))}, &rest)
	g.Open(t)
	res := await(t, ch)
	assertResult(t, res, 0, "", rest.Bytes())
	if rest.String() != "after\n" {
		t.Errorf("output after Sweep and Recover %q, want %q: the kept step did not go on", rest.String(), "after\n")
	}
}

// numberedLines is a step that prints lines 1..n, waits at the gate, then
// prints n+1..2n.
func numberedLines(id string, g Gate, n int) executor.Step {
	return executor.Step{ID: id, Name: "lines", Script: fmt.Sprintf(
		"i=1\nwhile [ $i -le %d ]; do echo \"line $i\"; i=$((i+1)); done\n%s\nwhile [ $i -le %d ]; do echo \"line $i\"; i=$((i+1)); done\n",
		n, g.Wait, 2*n)}
}

func linesText(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func testRecoverResumes(t *testing.T, h Harness) {
	newExecutor := h.Executor(t)
	s := prepare(t, newExecutor(), h.Spec(t, "run-1"))
	env := h.Env(t, s)
	if env.NewGate == nil {
		t.Skip("the harness has no gate to hold a step")
	}
	g := env.NewGate(t)
	const n = 500
	var out output
	ch := start(context.Background(), s, numberedLines("7", g, n), &out)
	out.waitLine(t, fmt.Sprintf("line %d", n))
	handle := s.Handle()
	if err := s.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if r := <-ch; !errors.Is(r.err, executor.ErrDetached) {
		t.Fatalf("Exec during Detach: %+v, %v; want ErrDetached", r.res, r.err)
	}
	// Resume from an offset inside what arrived: the caller shipped part
	// of it only. Nothing before the offset may come again.
	got := out.Bytes()
	offset := int64(len(got) / 2)
	for offset > 0 && got[offset-1] != '\n' {
		offset--
	}
	s2 := recoverSession(t, newExecutor(), handle)
	var rest output
	ch = start(context.Background(), s2, executor.Step{ID: "7", Offset: offset}, &rest)
	rest.waitLine(t, fmt.Sprintf("line %d", n))
	g.Open(t)
	res := await(t, ch)
	assertResult(t, res, 0, "", rest.Bytes())
	whole := append(bytes.Clone(got[:offset]), rest.Bytes()...)
	if want := linesText(1, 2*n); string(whole) != want {
		t.Errorf("output across Detach and Recover differs from the step's (got %d bytes, want %d; first difference at %d)",
			len(whole), len(want), firstDiff(whole, []byte(want)))
	}
	if res.Duration <= 0 {
		t.Errorf("duration %v after Recover, want the step's whole run time", res.Duration)
	}
}

func testEndedWhileDetached(t *testing.T, h Harness) {
	newExecutor := h.Executor(t)
	s := prepare(t, newExecutor(), h.Spec(t, "run-1"))
	env := h.Env(t, s)
	if env.NewGate == nil {
		t.Skip("the harness has no gate to hold a step")
	}
	g := env.NewGate(t)
	var out output
	ch := start(context.Background(), s, executor.Step{ID: "1", Script: "echo \"pid $$\"\n" + g.Wait + "\necho done\nexit 7\n"}, &out)
	pid := atoi(t, out.waitLine(t, "pid ")[0])
	handle := s.Handle()
	if err := s.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	<-ch
	g.Open(t)
	if env.Procs != nil {
		testwait.For(t, pollDeadline, "the step to end while detached", func() bool {
			for _, p := range procs(t, env) {
				if p.PID == pid && !p.Dead() {
					return false
				}
			}
			return true
		})
	} else {
		noteUnchecked(t, "that the step ended before Recover (no process list)")
	}
	s2 := recoverSession(t, newExecutor(), handle)
	res, rest := run(t, s2, executor.Step{ID: "1", Offset: int64(len(out.Bytes()))})
	assertResult(t, res, 7, "", rest)
	if string(rest) != "done\n" {
		t.Errorf("output after the step ended unattended %q, want %q", rest, "done\n")
	}
}

func testRecoverAfterCleanup(t *testing.T, h Harness) {
	newExecutor := h.Executor(t)
	s := prepare(t, newExecutor(), h.Spec(t, "run-1"))
	handle := s.Handle()
	if err := s.Cleanup(context.Background()); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if s2, err := newExecutor().Recover(context.Background(), handle); err == nil {
		_ = s2.Cleanup(context.Background())
		t.Errorf("Recover after Cleanup succeeded")
	} else if !errors.Is(err, executor.ErrNotRecoverable) {
		t.Errorf("Recover after Cleanup: %v, want ErrNotRecoverable", err)
	}
	assertNoLeftovers(t, h, "run-1", "after Cleanup")
}

func testRecoveredCleanup(t *testing.T, h Harness) {
	newExecutor := h.Executor(t)
	s := prepare(t, newExecutor(), h.Spec(t, "run-1"))
	env := h.Env(t, s)
	var out output
	ch := start(context.Background(), s, executor.Step{ID: "1", Script: "sleep 1000 &\necho \"pids $$ $!\"\nwait\n"}, &out)
	shell, bg := backgroundPids(t, &out)
	handle := s.Handle()
	if err := s.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	<-ch
	s2 := recoverSession(t, newExecutor(), handle)
	if err := s2.Cleanup(context.Background()); err != nil {
		t.Fatalf("Cleanup of a recovered session: %v", err)
	}
	if env.Procs != nil {
		assertGone(t, env, []int{shell, bg}, []int{shell})
	} else {
		noteUnchecked(t, "that the step's processes are gone")
	}
	assertNoLeftovers(t, h, "run-1", "after Cleanup of a recovered session")
}

// escapes starts a process three ways that leave the step's process group
// (GNU timeout makes its own group, a job-control subshell, setsid); each
// prints "esc PID" and appends its PID to esc.pids in the working
// directory.
const escapes = `timeout 300 sh -c 'echo "esc $$"; echo $$ >> esc.pids; exec sleep 300' &
(set -m; sh -c 'echo "esc $$"; echo $$ >> esc.pids; exec sleep 300' &)
setsid sh -c 'echo "esc $$"; echo $$ >> esc.pids; exec sleep 300' &
`

// waitEscapes makes the step wait until all three escapes have started.
const waitEscapes = "until [ -f esc.pids ] && [ $(wc -l < esc.pids) -ge 3 ]; do sleep 0.05; done\n"

// escapedPids waits for the three "esc PID" lines.
func escapedPids(t *testing.T, out *output) []int {
	t.Helper()
	var pids []int
	testwait.For(t, pollDeadline, "three esc lines", func() bool {
		pids = pids[:0]
		for line := range strings.Lines(out.String()) {
			if rest, ok := strings.CutPrefix(line, "esc "); ok && strings.HasSuffix(line, "\n") {
				pids = append(pids, atoi(t, strings.TrimSpace(rest)))
			}
		}
		return len(pids) == 3
	})
	return pids
}

func testEscapesSucceeded(t *testing.T, s executor.Session, env Env) {
	requireProcs(t, env)
	var out output
	res := await(t, start(context.Background(), s, executor.Step{Script: escapes + waitEscapes}, &out))
	assertResult(t, res, 0, "", out.Bytes())
	assertGone(t, env, escapedPids(t, &out), nil)
}

func testEscapesCancelled(t *testing.T, s executor.Session, env Env) {
	requireProcs(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out output
	ch := start(ctx, s, executor.Step{Script: escapes + "sleep 1000\n", Grace: 2 * time.Second}, &out)
	pids := escapedPids(t, &out)
	cancel()
	res := await(t, ch)
	assertResult(t, res, 143, api.ReasonCancelled, out.Bytes())
	assertGone(t, env, pids, nil)
}

func testEscapesTimedOut(t *testing.T, s executor.Session, env Env) {
	requireProcs(t, env)
	var out output
	ch := start(context.Background(), s, executor.Step{Script: escapes + "sleep 1000\n", Timeout: 2 * time.Second, Grace: 2 * time.Second}, &out)
	res := await(t, ch)
	assertResult(t, res, 143, api.ReasonTimeout, out.Bytes())
	assertGone(t, env, escapedPids(t, &out), nil)
}

// testSIGPIPEDefault: an agent that ignores SIGPIPE passes the ignore on to
// every step (exec keeps SIG_IGN), and `yes | head` then ends with
// "yes: standard output: Broken pipe" or loops.
func testSIGPIPEDefault(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Script: "yes | head -c 5\n"})
	assertResult(t, res, 0, "", out)
	if string(out) != "y\ny\ny" {
		t.Errorf("output %q, want %q: SIGPIPE must have its default action in steps", out, "y\ny\ny")
	}
}

func testSecondExecAttaches(t *testing.T, s executor.Session, env Env) {
	step := executor.Step{ID: "once", Script: "echo \"ran $$\"\nexit 4\n"}
	res, first := run(t, s, step)
	assertResult(t, res, 4, "", first)
	res, second := run(t, s, step)
	assertResult(t, res, 4, "", second)
	if !bytes.Equal(first, second) {
		t.Errorf("second Exec of step ID %q gave %q after %q: it ran the step again instead of attaching", step.ID, second, first)
	}
}
