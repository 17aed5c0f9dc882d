package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/dummy"
	"knotless.dev/knotless/internal/logship"
)

// runDummy executes workflowYAML with the dummy executor of world.
func runDummy(t *testing.T, world *dummy.World, workflowYAML string) (*memReporter, Result) {
	t.Helper()
	rep := newMemReporter()
	res := Execute(context.Background(), testJob(t, workflowYAML), dummy.New(world), rep)
	if rep.result == nil || !reflect.DeepEqual(*rep.result, res) {
		t.Fatalf("Done got %+v, Execute returned %+v", rep.result, res)
	}
	return rep, res
}

func TestExecute_PrepareFailureIsErroredExecutorAndLeavesNothing(t *testing.T) {
	world := dummy.NewWorld()
	rep, res := runDummy(t, world, "on: {push: {}}\nimage: "+dummy.FailPrepare+"\nsteps:\n  - run: echo never\n")
	if res.State != api.StateErrored || res.Reason != api.ReasonExecutor {
		t.Fatalf("result %+v, want errored/executor", res)
	}
	if f := rep.final(); f[0].State != api.StepErrored || f[1].State != api.StepSkipped {
		t.Errorf("steps %+v: want setup errored, step 1 skipped", f)
	}
	if !strings.Contains(rep.log(0), "could not prepare the run") {
		t.Errorf("setup log does not say preparing failed:\n%s", rep.log(0))
	}
	if ids := world.IDs(); len(ids) != 0 {
		t.Errorf("environments left: %v", ids)
	}
}

func TestExecute_OOMKilledStepFailsTheRunOOMKilled(t *testing.T) {
	rep, res := runDummy(t, dummy.NewWorld(), "on: {push: {}}\nsteps:\n  - run: |\n      echo allocating\n      oom\n  - run: echo never\n")
	if res.State != api.StateFailed || res.Reason != api.ReasonOOMKilled {
		t.Fatalf("result %+v, want failed/oom-killed (the step's fault: it outgrew its limit)", res)
	}
	f := rep.final()
	if f[1].State != api.StepFailed || f[1].Reason != api.ReasonOOMKilled || f[2].State != api.StepSkipped {
		t.Errorf("steps %+v", f)
	}
}

func TestExecute_EvictedStepErrorsTheRun(t *testing.T) {
	_, res := runDummy(t, dummy.NewWorld(), "on: {push: {}}\nsteps:\n  - continue-on-error: true\n    run: evicted\n  - run: echo never\n")
	if res.State != api.StateErrored || res.Reason != api.ReasonEvicted {
		t.Fatalf("result %+v, want errored/evicted: the environment's fault, whatever continue-on-error says", res)
	}
}

func TestExecute_VanishedEnvironmentErrorsTheRunExecutor(t *testing.T) {
	rep, res := runDummy(t, dummy.NewWorld(), "on: {push: {}}\nsteps:\n  - run: vanish\n")
	if res.State != api.StateErrored || res.Reason != api.ReasonExecutor {
		t.Fatalf("result %+v, want errored/executor: a vanished environment is never success", res)
	}
	if !strings.Contains(rep.log(0), "could not be executed") {
		t.Errorf("setup log does not say the step could not be executed:\n%s", rep.log(0))
	}
}

func TestExecute_ExitCodeOfTheFailingStepIsTheRuns(t *testing.T) {
	_, res := runDummy(t, dummy.NewWorld(), "on: {push: {}}\nsteps:\n  - run: echo a\n  - run: exit 9\n")
	if res.State != api.StateFailed || res.Reason != api.ReasonExitCode || res.ExitCode == nil || *res.ExitCode != 9 {
		t.Fatalf("result %+v, want failed/exit-code 9", res)
	}
}

// A run handed over mid-step and taken over by a new Execute (as a
// restarted runner does): the step is started once, its log is the step's
// whole output exactly once, the later steps run, and the run succeeds.
func TestExecute_HandedOverMidStepAndTakenOverResumesTheLogAtItsCheckpoint(t *testing.T) {
	world := dummy.NewWorld()
	wf := "on: {push: {}}\nsecrets: [TOKEN]\nsteps:\n  - secrets: [TOKEN]\n    run: |\n      print 2000 before s3cr3t-token-value\n      wait go\n      print 2000 after\n  - run: echo second\n"
	sp, err := logship.CreateSpool(t.TempDir(), 42)
	if err != nil {
		t.Fatal(err)
	}
	rep := SpoolReporter{Spool: sp}
	job := testJob(t, wf)
	job.Secrets = map[string]string{"TOKEN": "s3cr3t-token-value"}
	handover := make(chan struct{})
	job.Handover = handover
	done := make(chan Result, 1)
	go func() { done <- Execute(context.Background(), job, dummy.New(world), rep) }()
	deadline := time.Now().Add(10 * time.Second)
	for world.Started("run-42", "1") == 0 || !strings.Contains(readLog(t, sp, 1), "before s3cr3t") && !strings.Contains(readLog(t, sp, 1), "before *** 2000") {
		if time.Now().After(deadline) {
			t.Fatalf("the step did not print; log %q", readLog(t, sp, 1))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(handover)
	if res := <-done; res.State != "" {
		t.Fatalf("a handed-over Execute reported %+v; want nothing", res)
	}
	if done, _ := sp.Completed(); done {
		t.Fatalf("a handed-over run has a result in its journal")
	}

	rec, err := sp.Record()
	if err != nil || rec.Session == nil {
		t.Fatalf("journal: %+v, %v; want the environment's handle", rec, err)
	}
	var h executor.Handle
	if err := json.Unmarshal(rec.Session, &h); err != nil {
		t.Fatal(err)
	}
	c, ok, err := sp.LastCheckpoint(1)
	if err != nil || !ok {
		t.Fatalf("no checkpoint of step 1: %v", err)
	}
	job2 := testJob(t, wf)
	job2.Secrets = job.Secrets
	job2.Resume = &Resume{Session: &h, Started: time.Now(), Steps: rec.Steps, Checkpoints: map[int]logship.Checkpoint{1: c}, By: "test"}
	done2 := make(chan Result, 1)
	go func() { done2 <- Execute(context.Background(), job2, dummy.New(world), SpoolReporter{Spool: sp}) }()
	world.Open("go")
	res := <-done2
	if res.State != api.StateSucceeded {
		t.Fatalf("taken-over run %+v, want succeeded; setup log:\n%s", res, readLog(t, sp, 0))
	}
	if n := world.Started("run-42", "1"); n != 1 {
		t.Errorf("step 1 started %d times, want once", n)
	}
	var want strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&want, "before *** %d\n", i)
	}
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&want, "after %d\n", i)
	}
	// Where the output resumed, a marker line says so (issue 25: a gap
	// in the lines' times is explained); without it the log is the
	// step's output, exactly once.
	got := readLog(t, sp, 1)
	marker := regexp.MustCompile(`(?m)^\[knotless: the runner restarted: test took this step over at [0-9TZ:-]+; its output goes on below\]\n`)
	if n := len(marker.FindAllStringIndex(got, -1)); n != 1 {
		t.Fatalf("step log across the handover has %d restart markers, want 1:\n%s", n, got)
	}
	at := marker.FindStringIndex(got)
	if without := got[:at[0]] + got[at[1]:]; without != want.String() {
		t.Fatalf("step log across the handover: %d bytes, want %d (first difference at %d)", len(without), want.Len(), firstDifference(without, want.String()))
	}
	if got := readLog(t, sp, 2); got != "second\n" {
		t.Errorf("second step's log %q", got)
	}
	if !strings.Contains(readLog(t, sp, 0), "test took the run over") {
		t.Errorf("setup log does not say who took the run over:\n%s", readLog(t, sp, 0))
	}
}

func readLog(t *testing.T, sp *logship.Spool, step int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sp.Dir(), fmt.Sprintf("step-%d.log", step)))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func firstDifference(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestExecute_TakeoverWithoutCheckpointDoesNotRepeatTheLogsStart pins a
// rollout restart's fault: a runner pod whose spool was rebuilt from the
// server's record (no checkpoint: the output is made again from its first
// byte, and only what lies past the server's size is sent) wrote the
// restart marker before that first byte, which shifted everything, so the
// server's log repeated the step's start after the marker's tail. Taken
// over from the first byte, the log is the step's output exactly, with no
// marker.
func TestExecute_TakeoverWithoutCheckpointDoesNotRepeatTheLogsStart(t *testing.T) {
	world := dummy.NewWorld()
	wf := "on: {push: {}}\nsteps:\n  - run: |\n      print 300 before\n      wait go\n      print 300 after\n"
	sp, err := logship.CreateSpool(t.TempDir(), 42)
	if err != nil {
		t.Fatal(err)
	}
	job := testJob(t, wf)
	handover := make(chan struct{})
	job.Handover = handover
	done := make(chan Result, 1)
	go func() { done <- Execute(context.Background(), job, dummy.New(world), SpoolReporter{Spool: sp}) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(readLog(t, sp, 1), "before 300") {
		if time.Now().After(deadline) {
			t.Fatalf("the step did not print; log %q", readLog(t, sp, 1))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(handover)
	<-done
	rec, err := sp.Record()
	if err != nil || rec.Session == nil {
		t.Fatalf("journal: %+v, %v", rec, err)
	}
	var h executor.Handle
	if err := json.Unmarshal(rec.Session, &h); err != nil {
		t.Fatal(err)
	}
	job2 := testJob(t, wf)
	job2.Resume = &Resume{Session: &h, Started: time.Now(), Steps: rec.Steps, Checkpoints: map[int]logship.Checkpoint{}, By: "test"}
	done2 := make(chan Result, 1)
	go func() { done2 <- Execute(context.Background(), job2, dummy.New(world), SpoolReporter{Spool: sp}) }()
	world.Open("go")
	if res := <-done2; res.State != api.StateSucceeded {
		t.Fatalf("taken-over run %+v, want succeeded", res)
	}
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&want, "before %d\n", i)
	}
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&want, "after %d\n", i)
	}
	if got := readLog(t, sp, 1); got != want.String() {
		t.Fatalf("step log taken over from its first byte: %d bytes, want %d (first difference at %d): %.200q",
			len(got), want.Len(), firstDifference(got, want.String()), got)
	}
}
