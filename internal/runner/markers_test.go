package runner

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/testwait"
)

// TestExecute_DroppedAgentStreamIsMarkedInTheStepLog pins issue 25 item
// 3: where a step's output resumed on a new connection to its agent, the
// step's log holds a marker line saying so (the step ran on meanwhile, so
// a gap in the lines' times is explained), and nothing of the output is
// lost or repeated around it. A real shell executor and agent; the test
// closes the runner's end of the stream mid-step.
func TestExecute_DroppedAgentStreamIsMarkedInTheStepLog(t *testing.T) {
	var mu sync.Mutex
	var conns []io.Closer
	ex := shell.New(shell.Config{
		Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true, Logger: testLogger(t)},
		Dir:    filepath.Join(t.TempDir(), "shell"),
		Dial: func(ctx context.Context, socket string) (io.ReadWriteCloser, error) {
			c, err := agent.DialUnix(ctx, socket)
			if err == nil {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
			return c, err
		},
	})
	gate := filepath.Join(t.TempDir(), "gate")
	job := testJob(t, "on: {push: {}}\nsteps:\n  - run: |\n      echo before\n      while [ ! -e "+gate+" ]; do sleep 0.02; done\n      echo after\n")
	rep := newMemReporter()
	done := make(chan Result, 1)
	go func() { done <- Execute(context.Background(), job, ex, rep) }()
	testwait.Until(t, 30*time.Second, "the step to print", func() (bool, string) {
		return strings.Contains(rep.log(1), "before\n"), rep.log(0)
	})
	mu.Lock()
	for _, c := range conns {
		c.Close() // the runner's end of every stream: the step goes on
	}
	mu.Unlock()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.State != api.StateSucceeded {
		t.Fatalf("run %+v, want succeeded: a dropped stream is no failure", res)
	}
	marker := regexp.MustCompile(`^before\n\[knotless: the connection to the step agent dropped \(.+\); its output resumed at [0-9TZ:-]+, nothing lost\]\nafter\n$`)
	if got := rep.log(1); !marker.MatchString(got) {
		t.Fatalf("step log %q, want before, the reconnect marker, after", got)
	}
}

// TestStepLog_MarkerWaitsForTheNextLineAndNeverSplitsOne: a marker put
// while the log is in the middle of a line goes in at the next line's
// start; at the log's end it ends the last line; the bytes of the step's
// output are written exactly as they came.
func TestStepLog_MarkerWaitsForTheNextLineAndNeverSplitsOne(t *testing.T) {
	var b strings.Builder
	c := &countWriter{w: &b}
	c.Write([]byte("one\ntw"))
	c.mark("[m1]\n")
	c.Write([]byte("o still"))
	c.Write([]byte(" two\nthree\nfo"))
	c.mark("[m2]\n")
	c.flushMark()
	if want := "one\ntwo still two\n[m1]\nthree\nfo\n[m2]\n"; b.String() != want || c.n != int64(len(want)) {
		t.Fatalf("log %q (n %d), want %q", b.String(), c.n, want)
	}
	b.Reset()
	c = &countWriter{w: &b}
	c.mark("[m]\n") // at the log's start: right away with the first bytes
	c.Write([]byte("x\n"))
	if b.String() != "[m]\nx\n" {
		t.Fatalf("log %q", b.String())
	}
}
