package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/test/kubetest"
)

// summaryState reads "STATE[, REASON]" from a run's summary line.
var summaryState = regexp.MustCompile(`(?m)^run [0-9]+ \([^)]*\): ([a-z]+)(?:, ([a-z-]+))?`)

// TestE2E_KubeFaultsReadTheSameOnExecAndServerPaths: every way a kube run
// ends says why, the same on `knotless-run exec --executor kube` as
// through server and runner. The exec path once said "cancelled" (no
// reason) where the server path said errored: a step's `kill -TERM 1`,
// an agent or image that cannot execute, a pod evicted for its disk.
func TestE2E_KubeFaultsReadTheSameOnExecAndServerPaths(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	cases := []struct {
		file, workflow string
		state, reason  string
	}{
		{".knotless/workflows/term.yml", "on: {push: {}}\nsteps:\n  - run: echo started; kill -TERM 1; sleep 60\n", api.StateErrored, api.ReasonPodLost},
		{".knotless/workflows/disk.yml", "on: {push: {}}\nresources: {disk: 32Mi}\nsteps:\n  - run: dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; sleep 300\n", api.StateErrored, api.ReasonEvicted},
		{".knotless/workflows/arch.yml", "on: {push: {}}\nimage: " + kubetest.JobArm64OnlyImage + "\nsteps:\n  - run: echo never\n", api.StateErrored, api.ReasonUnsupported},
		{".knotless/workflows/exit.yml", "on: {push: {}}\nsteps:\n  - run: exit 3\n", api.StateFailed, api.ReasonExitCode},
	}
	files := map[string]string{}
	for _, c := range cases {
		files[c.file] = c.workflow
	}
	w.startRunner(w.registerRunner("kf1"), k.args...)
	runs := w.push(files, len(cases))
	server := map[string]api.Run{}
	for _, r := range runs {
		final := w.waitFinal(r.ID, 4*time.Minute)
		server[final.WorkflowPath] = final
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			if got := server[c.file]; got.State != c.state || got.Reason != c.reason {
				t.Errorf("server path: %s, want %s/%s", describe(got), c.state, c.reason)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, runnerBin(), append([]string{"exec", c.file}, k.args...)...)
			cmd.Dir = w.src
			cmd.Env = baseEnv(w.home)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatalf("knotless-run exec: %v", err)
			}
			m := summaryState.FindStringSubmatch(stdout.String())
			if m == nil || m[1] != c.state || m[2] != c.reason {
				t.Errorf("exec path: summary %q, want %s, %s\nstdout:\n%s\nstderr:\n%s", m, c.state, c.reason, stdout.String(), stderr.String())
			}
		})
	}
}
