package executortest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

// stepDeadline bounds every step the suite runs, so a hang fails the
// scenario instead of the whole test binary.
const stepDeadline = 2 * time.Minute

// pollDeadline bounds every wait for a condition.
const pollDeadline = 30 * time.Second

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// output is a step's out: safe to read while the step writes.
type output struct {
	syncbuf.Buffer
}

// waitLine waits for a line starting with prefix and returns its fields
// after the prefix.
func (o *output) waitLine(t *testing.T, prefix string) []string {
	t.Helper()
	var fields []string
	testwait.For(t, pollDeadline, "output line "+prefix, func() bool {
		for line := range strings.Lines(o.String()) {
			if rest, ok := strings.CutPrefix(line, prefix); ok && strings.HasSuffix(line, "\n") {
				fields = strings.Fields(rest)
				return true
			}
		}
		return false
	})
	return fields
}

// execResult is what a step started in the background ended with.
type execResult struct {
	res executor.Result
	err error
}

// start runs step in the background; the returned channel yields its end.
func start(ctx context.Context, s executor.Session, step executor.Step, out *output) <-chan execResult {
	ch := make(chan execResult, 1)
	go func() {
		res, err := s.Exec(ctx, step, out)
		ch <- execResult{res, err}
	}()
	return ch
}

// await waits for a background step's end.
func await(t *testing.T, ch <-chan execResult) executor.Result {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Exec: %v", r.err)
		}
		return r.res
	case <-time.After(stepDeadline):
		t.Fatalf("Exec did not return within %v", stepDeadline)
		return executor.Result{}
	}
}

// run runs step to its end and returns its result and output.
func run(t *testing.T, s executor.Session, step executor.Step) (executor.Result, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepDeadline)
	defer cancel()
	var out output
	res, err := s.Exec(ctx, step, &out)
	if err != nil {
		t.Fatalf("Exec: %v (output %q)", err, clip(out.Bytes()))
	}
	return res, out.Bytes()
}

// clip shortens b for a failure message.
func clip(b []byte) []byte {
	if len(b) > 2000 {
		return append(bytes.Clone(b[:2000]), "..."...)
	}
	return b
}

// requireProcs skips unless env can list processes.
func requireProcs(t *testing.T, env Env) {
	t.Helper()
	if env.Procs == nil {
		t.Skip("the executor's Env cannot list processes")
	}
}

func procs(t *testing.T, env Env) []Proc {
	t.Helper()
	ps, err := env.Procs()
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// assertGone fails unless no live process has a PID in pids or a PGID in
// pgids.
func assertGone(t *testing.T, env Env, pids, pgids []int) {
	t.Helper()
	for _, p := range procs(t, env) {
		if p.Dead() {
			continue
		}
		for _, pid := range pids {
			if p.PID == pid {
				t.Errorf("process %d (%q) is still alive after Exec returned", pid, p.Argv)
			}
		}
		for _, pg := range pgids {
			if p.PGID == pg {
				t.Errorf("process %d (%q) of the step's process group %d is still alive after Exec returned", p.PID, p.Argv, pg)
			}
		}
	}
}
