package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// gateWait is a shell line that waits for GATE/name.
func gateWait(name string) string {
	return fmt.Sprintf(`while [ ! -e "$GATE/%s" ]; do sleep 0.05; done`, name)
}

// A runner SIGKILLed mid-step and not started again within the lease: the
// server ends the run errored/runner-lost once the lease lapses, while the
// step goes on under its agent; the next runner process on the same work
// directory stops the agent and kills what the step was running, removes
// the leftover workspace, and runs the next pipeline.
func TestE2E_RunnerKilledAndNotBackWithinTheLeaseEndsRunnerLost(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2*time.Second)
	rid := w.registerRunner("r1")
	first := w.startRunner(rid)
	// A unique argument to find the step's processes in /proc.
	sleepArg := "600." + fmt.Sprint(time.Now().UnixNano()%1_000_000_007)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: hang
    run: |
      sleep ` + sleepArg + ` &
      touch "$GATE/started"
      sleep ` + sleepArg + `
`})
	w.waitGate(run.ID, "started", 60*time.Second)
	testwait.Until(t, 10*time.Second, "both sleeps of the step", func() (bool, string) {
		pids := pidsWithArg(sleepArg)
		return len(pids) == 2, fmt.Sprint(pids)
	})
	if r := w.run(run.ID); r.State != api.StateRunning {
		t.Fatalf("%s, want running while the step sleeps", describe(r))
	}
	workspace := filepath.Join(rid.work, "runs", itoa(run.ID))
	if !fileExists(workspace) {
		t.Fatalf("no workspace %s while the run is going", workspace)
	}

	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	final := w.waitRun(run.ID, 20*time.Second, "errored/runner-lost", func(r api.Run) bool { return api.IsFinal(r.State) })
	if final.State != api.StateErrored || final.Reason != api.ReasonRunnerLost {
		t.Fatalf("%s, want errored/runner-lost", describe(final))
	}
	if pids := pidsWithArg(sleepArg); len(pids) != 2 {
		t.Fatalf("the step's processes %v: want both still running under the agent before a new runner starts", pids)
	}

	second := w.startRunner(rid)
	testwait.Until(t, 20*time.Second, "the new runner to kill the killed run's processes", func() (bool, string) {
		if second.exited() {
			t.Fatalf("the new runner exited:\n%s", second.output())
		}
		pids := pidsWithArg(sleepArg)
		return len(pids) == 0, fmt.Sprintf("pids %v still run", pids)
	})
	testwait.Until(t, 20*time.Second, "the leftover workspace to be removed", func() (bool, string) {
		return !fileExists(workspace), workspace + " exists"
	})
	if r := w.run(run.ID); r.State != api.StateErrored || r.Reason != api.ReasonRunnerLost {
		t.Fatalf("after the new runner started: %s, want still errored/runner-lost", describe(r))
	}

	next := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: fine
    run: echo after the crash
`})
	if r := w.waitFinal(next.ID, 60*time.Second); r.State != api.StateSucceeded {
		t.Fatalf("next pipeline: %s, want succeeded", describe(r))
	}
	if got := w.stepLog(next.ID, 1); got != "after the crash\n" {
		t.Fatalf("next run's log = %q", got)
	}
}

// The server stopped (SIGTERM) while a step prints, kept down longer than
// the lease while the step goes on printing, and started again on the same
// port and data directory: the run completes and its log holds every line
// once, in order.
func TestE2E_ServerRestartMidRunKeepsRunAndLog(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: count
    run: |
      i=1
      while [ $i -le 10 ]; do echo "line $i"; i=$((i+1)); done
      touch "$GATE/printed-10"
      ` + gateWait("server-down") + `
      while [ $i -le 40 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done
      touch "$GATE/printed-40"
      ` + gateWait("server-up") + `
      while [ $i -le 50 ]; do echo "line $i"; i=$((i+1)); sleep 0.02; done
`})
	w.waitGate(run.ID, "printed-10", 60*time.Second)
	testwait.Until(t, 10*time.Second, "the first lines on the server", func() (bool, string) {
		log := w.stepLog(run.ID, 1)
		return strings.HasSuffix(log, "line 10\n"), fmt.Sprintf("%q", log)
	})

	w.stopServer()
	down := time.Now()
	w.openGate("server-down")
	w.waitGate(run.ID, "printed-40", 30*time.Second) // 30 lines 0.1 s apart while the server is down
	if d := time.Since(down); d < w.lease {
		t.Fatalf("the server was down %s only; the test needs an outage longer than the lease (%s)", d, w.lease)
	}
	w.restartServer()
	w.openGate("server-up")

	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded", describe(final))
	}
	var want strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := w.stepLog(run.ID, 1); got != want.String() {
		t.Fatalf("log after the restart:\n%s\nwant line 1..50 once each, in order", got)
	}
}

// `knotless run cancel` reaches the step within seconds: it gets SIGTERM
// (its trap runs) and the run ends cancelled even though the trap exits 0.
func TestE2E_CancelReachesStepWithinSeconds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: wait
    run: |
      trap 'touch "$GATE/got-term"; exit 0' TERM
      touch "$GATE/started"
      sleep 600 &
      wait $!
  - name: after
    run: |
      touch "$GATE/after-ran"
`})
	w.waitGate(run.ID, "started", 60*time.Second)
	start := time.Now()
	w.cliOK("", "run", "cancel", itoa(run.ID))
	final := w.waitFinal(run.ID, 15*time.Second)
	took := time.Since(start)
	if final.State != api.StateCancelled || final.Reason != api.ReasonCancelled {
		t.Fatalf("%s, want cancelled/cancelled (the trap's exit 0 must not make it succeed)", describe(final))
	}
	if !fileExists(filepath.Join(w.gate, "got-term")) {
		t.Errorf("the step's TERM trap did not run: it was not sent SIGTERM first")
	}
	if fileExists(filepath.Join(w.gate, "after-ran")) {
		t.Errorf("the step after the cancelled one ran")
	}
	t.Logf("cancel to final state: %s", took)

	var shown api.Run
	if err := json.Unmarshal([]byte(w.cliOK("", "run", "show", itoa(run.ID), "--json")), &shown); err != nil {
		t.Fatalf("run show --json: %v", err)
	}
	st := map[int]api.Step{}
	for _, s := range shown.Steps {
		st[s.Index] = s
	}
	if shown.State != api.StateCancelled || st[1].State != api.StepCancelled || st[2].State != api.StepSkipped {
		t.Fatalf("run show --json: %s with steps %+v; want cancelled, step 1 cancelled, step 2 skipped", describe(shown), shown.Steps)
	}
}

// SIGINT to a runner (and SIGTERM with --handover=false) lets its running
// run finish within --stop-wait (then the runner exits 0); with a short
// --stop-wait the run is cancelled with reason runner-stopped instead.
func TestE2E_RunnerSIGINTFinishesRunningRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	rid := w.registerRunner("r1")
	workflow := func(gate string) map[string]string {
		return map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: gated
    run: |
      touch "$GATE/started-` + gate + `"
      ` + gateWait(gate) + `
      echo "` + gate + ` opened"
`}
	}

	patient := w.startRunner(rid, "--stop-wait", "30s")
	run := w.pushOne(workflow("a"))
	w.waitGate(run.ID, "started-a", 60*time.Second)
	patient.signal(t, syscall.SIGINT)
	testwait.Until(t, 10*time.Second, "the runner to say it lets the run finish", func() (bool, string) {
		return strings.Contains(patient.output(), "letting running runs finish"), ""
	})
	if patient.exited() {
		t.Fatalf("the runner exited while its run was going:\n%s", patient.output())
	}
	// A stopping runner claims nothing more: a run pushed now stays queued.
	queued := w.pushOne(workflow("b"))
	w.openGate("a")
	final := w.waitFinal(run.ID, 30*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded: the stopping runner must let it finish", describe(final))
	}
	if code := patient.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGINT, want 0", code)
	}
	if got := w.stepLog(run.ID, 1); got != "a opened\n" {
		t.Fatalf("log = %q", got)
	}

	if r := w.run(queued.ID); r.State != api.StateQueued {
		t.Fatalf("run pushed while the runner was stopping: %s, want queued", describe(r))
	}

	hasty := w.startRunner(rid, "--stop-wait", "1s", "--handover=false")
	run = queued
	w.waitGate(run.ID, "started-b", 60*time.Second)
	hasty.signal(t, syscall.SIGTERM)
	final = w.waitFinal(run.ID, 30*time.Second)
	if final.State != api.StateCancelled || final.Reason != api.ReasonRunnerStopped {
		t.Fatalf("%s, want cancelled/runner-stopped after --stop-wait 1s", describe(final))
	}
	if code := hasty.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM, want 0", code)
	}
	if leftover, _ := os.ReadDir(filepath.Join(rid.work, "runs")); len(leftover) != 0 {
		t.Fatalf("workspaces left in %s: %v", filepath.Join(rid.work, "runs"), leftover)
	}
}

// After a server outage of 14 s, what the runner spooled (the
// log written during the outage and the run's result) reaches the server
// within a few seconds of its return. It used to take ~11 s: the retry
// backoff had doubled up to 12.8 s while nothing answered. A refused
// connection costs the server nothing, so the runner retries an
// unreachable server about every second (api.RetryWait). The bound is 3 s
// from the moment the restarted server answers: at most ~1 s of backoff,
// plus a round of shipping and some slack for a loaded test machine.
func TestE2E_ServerBackAfterOutageGetsLogAndResultWithinSeconds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, time.Minute) // no lease lapses during the outage
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: outage
    run: |
      echo before
      ` + gateWait("server-down") + `
      i=1
      while [ $i -le 20 ]; do echo "during outage $i"; i=$((i+1)); done
      touch "$GATE/printed"
`})
	testwait.Until(t, 60*time.Second, "the first line on the server", func() (bool, string) {
		log := w.stepLog(run.ID, 1)
		return log == "before\n", fmt.Sprintf("%q", log)
	})
	w.stopServer()
	down := time.Now()
	w.openGate("server-down")
	w.waitGate(run.ID, "printed", 30*time.Second)
	// Long enough for a doubling backoff (200 ms, 400 ms, ... retries at
	// 12.6 s and 25.4 s after the first failure) to miss the return by
	// ~11 s.
	time.Sleep(14*time.Second - time.Since(down))
	w.restartServer()
	back := time.Now()
	var want strings.Builder
	want.WriteString("before\n")
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&want, "during outage %d\n", i)
	}
	testwait.Until(t, 30*time.Second, "the run's result and log", func() (bool, string) {
		r := w.run(run.ID)
		return api.IsFinal(r.State) && w.stepLog(run.ID, 1) == want.String(), describe(r)
	})
	if d := time.Since(back); d > 3*time.Second {
		t.Errorf("log and result arrived %s after the server was back (outage %s), want within 3 s", d.Round(time.Millisecond), back.Sub(down).Round(time.Second))
	} else {
		t.Logf("log and result arrived %s after the server was back", d.Round(time.Millisecond))
	}
	if r := w.run(run.ID); r.State != api.StateSucceeded {
		t.Errorf("%s, want succeeded", describe(r))
	}
}
