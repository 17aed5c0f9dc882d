package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `make demo` (scripts/demo.sh) with the programs this test built: a server,
// a runner and this repository's own pipeline (build, vet, unit tests) end
// to end; it must exit 0 and say the pipeline succeeded. It takes about
// half a minute with a warm Go build cache.
func TestE2E_DemoScript(t *testing.T) {
	if testing.Short() {
		t.Skip("runs this repository's whole pipeline; skipped with -short")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(moduleRoot, "scripts", "demo.sh"))
	cmd.Dir = moduleRoot
	// The machine's own environment (HOME, Go caches): the demo's pipeline
	// reuses the build cache as `make demo` does.
	cmd.Env = append(os.Environ(), "BIN="+binDir, "TMPDIR="+t.TempDir(), "KEEP_DEMO=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On timeout: SIGTERM lets the script stop what it started; whatever is
	// left a while later is killed with its process group.
	cmd.Cancel = func() error { return syscall.Kill(cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err := cmd.Wait()
	took := time.Since(start)
	t.Logf("demo took %s", took.Round(100*time.Millisecond))
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		t.Fatalf("scripts/demo.sh: exit %d after %s\n%s", ee.ExitCode(), took, out.String())
	default:
		t.Fatalf("scripts/demo.sh: %v after %s\n%s", err, took, out.String())
	}
	for _, want := range []string{"pipeline succeeded", "── step 1/", "): succeeded"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
