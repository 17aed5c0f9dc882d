package agentenv_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

// A session detached mid-step (its runner process died) and recovered by
// another Executor value (the next runner process): Exec with the same
// step ID and the offset already consumed attaches to the running step,
// which started exactly once (it appends its PID to a file at each start),
// the output goes on from that byte, and the client's log says the agent
// answered Started{Attached: true}. A re-run would pass a test that only
// compares the log: the bytes a re-run repeats are the ones skipped.
func TestLocal_RecoveredSessionAttachesToTheRunningStepStartedOnce(t *testing.T) {
	dir, bin, ws := t.TempDir(), agenttest.Binary(t), t.TempDir()
	var logs syncbuf.Buffer
	newExec := func() *local {
		l := &local{dir: dir, bin: bin}
		cfg := agentenv.Config{Agent: bin, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Defaults()
		l.Base = agentenv.NewBase("local", (*localDriver)(l), cfg, nil)
		return l
	}
	first := newExec()
	s, err := first.Prepare(context.Background(), executor.Spec{ID: "run-1", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	starts := filepath.Join(ws, "starts")
	step := executor.Step{ID: "1", Script: "echo $$ >> " + starts + "\necho started\nwhile [ ! -e go ]; do sleep 0.05; done\necho finished\n"}
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := s.Exec(context.Background(), step, &out)
		done <- err
	}()
	testwait.Until(t, 30*time.Second, "the step to start", func() (bool, string) { return out.String() == "started\n", out.String() })
	if err := s.Detach(); err != nil { // as the runner's death would
		t.Fatal(err)
	}
	<-done

	second := newExec()
	r, err := second.Recover(context.Background(), s.Handle())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Cleanup(context.Background()) })
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var rest syncbuf.Buffer
	step.Offset = int64(len("started\n"))
	res, err := r.Exec(context.Background(), step, &rest)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec after Recover: %+v, %v", res, err)
	}
	if rest.String() != "finished\n" {
		t.Errorf("output after the offset %q, want %q", rest.String(), "finished\n")
	}
	if b, _ := os.ReadFile(starts); len(strings.Fields(string(b))) != 1 {
		t.Errorf("the step started %d times (PIDs %q), want once", len(strings.Fields(string(b))), b)
	}
	if !strings.Contains(logs.String(), "attached to a step that was running already") {
		t.Errorf("the client's log does not say it attached:\n%s", logs.String())
	}
}
