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

// TestKube_BridgeKilledMidStepResumesOnBothPaths: the exec bridge to the
// agent (`knotless-agent connect` in the pod) killed again and again
// while a step prints: the runner re-dials and the step ends with its
// true result and every line once, for a runner (the server path) and for
// `knotless-run exec` (Ephemeral, whose agent ends once no runner has been
// connected for a while) alike. The exec path once ended 4 of 8 such runs
// cancelled.
func TestKube_BridgeKilledMidStepResumesOnBothPaths(t *testing.T) {
	for _, ephemeral := range []bool{false, true} {
		t.Run(fmt.Sprintf("ephemeral=%v", ephemeral), func(t *testing.T) {
			f := newFixture(t)
			cfg := f.config()
			cfg.Ephemeral = ephemeral
			s := f.prepare(t, f.executor(t, cfg), f.spec(t, runID("bridge")))
			pod := podOf(t, s)
			var out syncbuf.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			ch := startStep(ctx, s, executor.Step{ID: "1", Script: "i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo line $i; sleep 0.1; done; exit 3"}, &out)
			waitOutput(t, &out, "line 1\n", time.Minute)
			kills := 0
			for i := 0; i < 4; i++ {
				// The bridge is the connect process the runner's exec runs.
				b, err := f.podExec(ctx, pod, `for d in /proc/[0-9]*; do if tr '\000' ' ' < $d/cmdline 2>/dev/null | grep -q '^/knotless/knotless-agent connect'; then kill -9 ${d#/proc/} && echo killed; fi; done`)
				if err != nil {
					t.Fatalf("kill the bridge: %v", err)
				}
				kills += strings.Count(string(b), "killed")
				time.Sleep(700 * time.Millisecond)
			}
			res, err := await(t, ch, 2*time.Minute)
			if kills == 0 {
				t.Fatal("no bridge was killed: the test proves nothing")
			}
			var want strings.Builder
			for i := 1; i <= 60; i++ {
				fmt.Fprintf(&want, "line %d\n", i)
			}
			if err != nil || res.ExitCode != 3 || res.Reason != "" {
				t.Errorf("after %d bridges killed: %+v, %v; want exit 3", kills, res, err)
			}
			if got := string(out.Bytes()); got != want.String() {
				t.Errorf("output after %d bridges killed:\n%s", kills, got)
			}
		})
	}
}
