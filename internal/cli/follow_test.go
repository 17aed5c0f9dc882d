package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

// startCLI runs the CLI in a goroutine with shared buffers; the returned
// channel yields its exit code.
func startCLI(ctx context.Context, e env, args ...string) (stdout, stderr *syncbuf.Buffer, code <-chan int) {
	stdout, stderr = &syncbuf.Buffer{}, &syncbuf.Buffer{}
	c := make(chan int, 1)
	go func() {
		a := &App{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr, Getenv: e.get}
		c <- a.Run(ctx, args)
	}()
	return stdout, stderr, c
}

func TestRunLogsFollow_SurvivesServerRestartWithWholeLog(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	rn := srv.RegisterRunner(t, "admin/app", "build-1", nil, true)
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": workflowTwoSteps}, "refs/heads/main")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, errb, code := startCLI(ctx, e, "run", "logs", "--repo", "admin/app", "--latest", "-f")
	steps := []stepScript{
		{name: "build", log: "before the restart|after the restart\n", state: api.StepSucceeded},
		{name: "test", log: "second step\n", state: api.StepSucceeded},
	}
	run := playRun(t, rn, "setup\n", steps, api.StateSucceeded, 0, func() {
		testwait.For(t, 20*time.Second, "the first half of step 1", func() bool {
			return strings.Contains(out.String(), "before the rest")
		})
		srv.Restart()
	})
	if c := testwait.Receive(t, code, time.Minute, "the CLI to exit"); c != ExitOK {
		t.Fatalf("exit %d, stderr %q", c, errb.String())
	}
	t.Logf("stderr: %s", errb.String())
	want := "── setup ──\nsetup\n── done ──\n" +
		"── step 1/2: build ──\nbefore the restart|after the restart\n── succeeded, exit 0, 1.5s ──\n" +
		"── step 2/2: test ──\nsecond step\n── succeeded, exit 0, 1.5s ──\n" +
		fmt.Sprintf("run %d (ci): succeeded, exit 0\n", run.ID)
	if out.String() != want {
		t.Errorf("followed logs across a restart:\n%s\nwant:\n%s\nstderr:\n%s", out.String(), want, errb.String())
	}
}

func TestRunLogsFollow_InterruptExits130(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": workflowTwoSteps}, "refs/heads/main")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, errb, code := startCLI(ctx, e, "run", "logs", "--repo", "admin/app", "--latest", "-f")
	// No runner: the run stays queued and the CLI says so.
	testwait.For(t, 20*time.Second, "the queued notice", func() bool { return strings.Contains(errb.String(), "is queued") })
	cancel()
	if c := testwait.Receive(t, code, 30*time.Second, "the CLI to exit"); c != ExitInterrupted {
		t.Errorf("exit %d after an interrupt, want %d; stderr %q", c, ExitInterrupted, errb.String())
	}
}

func TestRunLogsLatest_NoNewPipelineTimesOutWithExit1(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	// Nothing pushed yet: without -f there is nothing to show.
	mustRun(t, e, ExitNotFound, nil, "run", "logs", "--repo", "admin/app", "--latest")
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": workflowTwoSteps}, "refs/heads/main")
	r := mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app", "--json")
	var list api.ListRunsOutput
	decodeJSON(t, r.stdout, &list)
	if len(list.Runs) != 1 {
		t.Fatalf("runs: %+v", list.Runs)
	}
	p := fmt.Sprint(list.Runs[0].Pipeline)
	r = mustRun(t, e, ExitFailed, nil, "run", "logs", "--repo", "admin/app", "--latest", "-f", "--after", p, "--timeout", "1s")
	if !strings.Contains(r.stderr, "no pipeline newer than "+p) {
		t.Errorf("stderr %q", r.stderr)
	}
}
