package agentenv_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/executortest"
	"knotless.dev/knotless/internal/syncbuf"
)

// TestLocal_PassesTheSharedSuite: an executor that writes only its
// Driver (local, a few dozen lines) has every behaviour the shared suite
// pins, lifecycle and recovery included: the layer is the executor.
func TestLocal_PassesTheSharedSuite(t *testing.T) {
	dirs := map[*testing.T]string{}
	dirOf := func(t *testing.T) string {
		if d, ok := dirs[t]; ok {
			return d
		}
		dirs[t] = t.TempDir()
		return dirs[t]
	}
	executortest.Run(t, executortest.Harness{
		Executor: func(t *testing.T) func() executor.Executor {
			dir, bin := dirOf(t), agenttest.Binary(t)
			return func() executor.Executor { return newLocal(dir, bin) }
		},
		Spec: func(t *testing.T, id string) executor.Spec {
			return executor.Spec{ID: id, Workspace: t.TempDir()}
		},
		Env: func(t *testing.T, s executor.Session) executortest.Env {
			return executortest.Env{Procs: executortest.HostProcs, NewGate: executortest.FifoGate(s.Workdir())}
		},
		Leftovers: func(t *testing.T, id string) []string {
			if _, err := os.Stat(filepath.Join(dirOf(t), id)); err == nil {
				return []string{"directory " + id}
			}
			return nil
		},
	})
}

// ended is how an Exec ended.
type ended struct {
	res executor.Result
	err error
}

// startSleeper prepares a local session and starts a step that sleeps,
// returning the executor, the step's result channel and the agent's PID.
func startSleeper(t *testing.T) (*local, <-chan ended, int) {
	t.Helper()
	l := newLocal(t.TempDir(), agenttest.Binary(t))
	s, err := l.Prepare(context.Background(), executor.Spec{ID: "run-1", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	var out syncbuf.Buffer
	done := make(chan ended, 1)
	go func() {
		res, err := s.Exec(context.Background(), executor.Step{ID: "1", Script: "echo started; sleep 600"}, &out)
		done <- ended{res, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "started") {
		if time.Now().After(deadline) {
			t.Fatalf("the step did not start: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return l, done, agentPID(filepath.Join(l.dir, "run-1"))
}

// TestLocal_StepStoppedByTheEnvironmentTakesItsReasonNotCancelled: a
// SIGTERM to the agent from outside (a pod deleted or evicted, a container
// stopped) makes it stop the running step as cancelled; nobody cancelled
// it, so the step ends with the environment's own reason and words, never
// cancelled.
func TestLocal_StepStoppedByTheEnvironmentTakesItsReasonNotCancelled(t *testing.T) {
	l, done, pid := startSleeper(t)
	l.fault.Store(&executor.Fault{Reason: api.ReasonEvicted, Message: "the node ran out of disk"})
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-done:
		if res := e.res; e.err != nil || res.Reason != api.ReasonEvicted || res.Note != "the node ran out of disk" || res.ExitCode != -1 {
			t.Errorf("result %+v, %v; want evicted with the environment's message and no exit code", res, e.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Exec did not return after its agent was signalled")
	}
}

// TestLocal_StepStoppedByASilentEnvironmentIsErroredNotCancelled: when
// the environment never says why it signalled the agent, the step still
// does not read as cancelled: it ends with the executor's reason and a
// note saying nobody cancelled it, or (when the agent was gone before it
// could say how the step ended) with an error saying the agent is gone,
// which the runner reports as errored/executor.
func TestLocal_StepStoppedByASilentEnvironmentIsErroredNotCancelled(t *testing.T) {
	_, done, pid := startSleeper(t)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-done:
		switch {
		case e.err != nil:
			if !strings.Contains(e.err.Error(), "agent is gone") {
				t.Errorf("error %v, want one saying the agent is gone", e.err)
			}
		case e.res.Reason != api.ReasonExecutor || !strings.Contains(e.res.Note, "nobody cancelled it"):
			t.Errorf("result %+v, want executor with a note that nobody cancelled it", e.res)
		}
	case <-time.After(time.Minute):
		t.Fatal("Exec did not return after its agent was signalled")
	}
}

// TestLocal_CompressSendsCopiesCompressed: with Env.Compress
// (the kube executor's) a copy in and a copy out of 3.84 MB of text cross the
// connection zstd-compressed, in a tenth of the bytes or less; without it
// (the control) they cross whole. The file arrives byte for byte either
// way.
func TestLocal_CompressSendsCopiesCompressed(t *testing.T) {
	text := bytes.Repeat([]byte("a line of a checkout, as source files have many\n"), 80_000) // 3.84 MB
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "big.txt"), text, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			l := newLocal(t.TempDir(), agenttest.Binary(t))
			l.compress = compress
			ctx := context.Background()
			s, err := l.Prepare(ctx, executor.Spec{ID: "run-1", Workspace: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
			sent := l.sent.Load()
			if err := s.CopyIn(ctx, src, "in"); err != nil {
				t.Fatal(err)
			}
			sent = l.sent.Load() - sent
			out := filepath.Join(t.TempDir(), "out")
			received := l.received.Load()
			if err := s.CopyOut(ctx, "in", out); err != nil {
				t.Fatal(err)
			}
			received = l.received.Load() - received
			for _, p := range []string{filepath.Join(s.Workdir(), "in", "big.txt"), filepath.Join(out, "big.txt")} {
				if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, text) {
					t.Fatalf("%s: %d bytes (err %v), want the %d bytes sent", p, len(got), err, len(text))
				}
			}
			t.Logf("%d bytes copied: %d sent, %d received", len(text), sent, received)
			for what, n := range map[string]int64{"copy in sent": sent, "copy out received": received} {
				if compress && n > int64(len(text))/10 {
					t.Errorf("%s %d bytes for a copy of %d compressible bytes: not compressed", what, n, len(text))
				}
				if !compress && n < int64(len(text)) {
					t.Errorf("%s %d bytes for a copy of %d bytes without compression: less than the file", what, n, len(text))
				}
			}
		})
	}
}

// TestLocal_CompressSendsStepOutputCompressedOnlyWhereItShrinks: with
// Env.Compress a step printing 3.84 MB of text sends a tenth of that or
// less over the connection; one printing 2 MB of random bytes sends them
// as they are (no frame grows by compressing); without Compress (the
// control) the text crosses whole. The output arrives byte for byte in
// every case.
func TestLocal_CompressSendsStepOutputCompressedOnlyWhereItShrinks(t *testing.T) {
	text := bytes.Repeat([]byte("a line of a build log, as compilers print many\n"), 80_000)
	random := make([]byte, 2<<20)
	_, _ = rand.NewChaCha8([32]byte{3}).Read(random)
	work := t.TempDir()
	for name, data := range map[string][]byte{"text": text, "random": random} {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name     string
		compress bool
		data     []byte
	}{{"text", true, text}, {"random", true, random}, {"text", false, text}} {
		t.Run(fmt.Sprintf("%s/compress=%v", c.name, c.compress), func(t *testing.T) {
			l := newLocal(t.TempDir(), agenttest.Binary(t))
			l.compress = c.compress
			ctx := context.Background()
			s, err := l.Prepare(ctx, executor.Spec{ID: "run-1", Workspace: work})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
			var out bytes.Buffer
			received := l.received.Load()
			res, err := s.Exec(ctx, executor.Step{ID: "print", Script: "cat " + c.name}, &out)
			received = l.received.Load() - received
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("step: %+v, %v", res, err)
			}
			if !bytes.Equal(out.Bytes(), c.data) {
				t.Fatalf("%d bytes of output arrived, not the %d the step printed", out.Len(), len(c.data))
			}
			t.Logf("%d bytes printed, %d received", len(c.data), received)
			switch {
			case c.compress && c.name == "text" && received > int64(len(c.data))/10:
				t.Errorf("%d bytes received for %d bytes of text: not compressed", received, len(c.data))
			case (!c.compress || c.name == "random") && received < int64(len(c.data)):
				t.Errorf("%d bytes received for %d bytes that do not shrink: fewer than the output", received, len(c.data))
			case c.name == "random" && received > int64(len(c.data))*101/100:
				t.Errorf("%d bytes received for %d random bytes: more than the output and its frames", received, len(c.data))
			}
		})
	}
}

// writeCounter counts the writes an Exec makes to its output: one per
// output frame that arrived.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) { w.writes++; return w.Buffer.Write(p) }

// TestLocal_ChattyStepOutputArrivesInFewFrames: a step writing 20,000
// lines one write each (a shell loop's echo) reaches the client in at most
// one frame per 2 ms of the step's run (plus the first), not a frame per
// write; every line arrives, in order.
func TestLocal_ChattyStepOutputArrivesInFewFrames(t *testing.T) {
	l := newLocal(t.TempDir(), agenttest.Binary(t))
	ctx := context.Background()
	s, err := l.Prepare(ctx, executor.Spec{ID: "run-1", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	var out writeCounter
	res, err := s.Exec(ctx, executor.Step{ID: "chatty", Script: `i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done`}, &out)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v, %v", res, err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 20000 || lines[0] != "line 0" || lines[19999] != "line 19999" {
		t.Fatalf("%d lines arrived (first %q), want line 0 … line 19999", len(lines), lines[0])
	}
	most := int(res.Duration/(2*time.Millisecond)) + 2
	t.Logf("20000 writes in %v arrived in %d frames (at most %d)", res.Duration, out.writes, most)
	if out.writes > most {
		t.Errorf("20000 writes in %v arrived in %d frames: more than one per 2 ms (%d)", res.Duration, out.writes, most)
	}
}
