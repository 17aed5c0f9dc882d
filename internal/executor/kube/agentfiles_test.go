package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
)

// TestKube_StepThatRemovesTheAgentsFilesLosesNothing: a step (the agent's
// own user) removes the agent's socket and overwrites its program, then
// its stream drops (the bridge killed). The runner once could not
// re-attach: the run ended two minutes later and the output printed after
// the removal was lost. The agent now listens again and restores its
// program, so the step ends with its true result and every line.
func TestKube_StepThatRemovesTheAgentsFilesLosesNothing(t *testing.T) {
	f := newFixture(t)
	s := f.prepare(t, f.executor(t, f.config()), f.spec(t, runID("rmagent")))
	pod := podOf(t, s)
	var out syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	script := "rm -f /knotless/agent.sock /knotless/knotless-agent; echo junk > /knotless/knotless-agent; echo removed\n" +
		"i=0; while [ $i -lt 30 ]; do i=$((i+1)); echo line $i; sleep 0.1; done; exit 4\n"
	ch := startStep(ctx, s, executor.Step{ID: "1", Script: script}, &out)
	waitOutput(t, &out, "removed\nline 1\n", time.Minute)
	time.Sleep(time.Second) // the agent looks every 500 ms
	b, err := f.podExec(ctx, pod, `for d in /proc/[0-9]*; do if tr '\000' ' ' < $d/cmdline 2>/dev/null | grep -q '^/knotless/knotless-agent connect'; then kill -9 ${d#/proc/} && echo killed; fi; done`)
	if err != nil || !strings.Contains(string(b), "killed") {
		t.Fatalf("kill the bridge: %q, %v", b, err)
	}
	t0 := time.Now()
	res, err := await(t, ch, 2*time.Minute)
	var want strings.Builder
	want.WriteString("removed\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if err != nil || res.ExitCode != 4 || string(out.Bytes()) != want.String() {
		t.Errorf("after the step removed the agent's files and the stream dropped: %+v, %v, output %q", res, err, out.Bytes())
	}
	if took := time.Since(t0); took > 30*time.Second {
		t.Errorf("it took %s after the stream dropped", took)
	}
}
