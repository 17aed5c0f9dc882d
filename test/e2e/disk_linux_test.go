package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testenv"
)

// needRoot skips a test that mounts file systems when not root.
func needRoot(t *testing.T, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "skipped: needs root to %s", what)
	}
}

// The runner's work directory on a 4 MiB file system and a step printing
// 10 MB: the disk fills. The run used to end succeeded with 38% of the
// log, the next step's output gone, and only the runner's own log saying
// "lost bytes". Now the step's log has a marker where bytes went missing,
// the setup log says so, and the run ends errored/executor.
func TestE2E_FullWorkDirLogLossIsMarkedAndNotSuccess(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount a 4 MiB tmpfs as the runner's work directory")
	w := newWorld(t, 30*time.Second)
	r := w.registerRunner("r1")
	if err := os.MkdirAll(r.work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", r.work, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		testenv.Skipf(t, "skipped: cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(r.work, unix.MNT_DETACH) }) // after the runner is stopped
	w.startRunner(r)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: flood
    run: yes 'knotless log line 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01' | head -n 100000
  - name: after
    run: echo after the flood
`})
	final := w.waitFinal(run.ID, 120*time.Second)
	log1 := w.stepLog(run.ID, 1)
	setup := w.stepLog(run.ID, api.SetupStep)
	lines := strings.Count(log1, "knotless log line")
	t.Logf("%s; step 1 has %d of 100000 lines", describe(final), lines)
	if lines == 100000 {
		testenv.Skipf(t, "skipped: the 4 MiB work directory never filled (the runner kept up); nothing was lost to check")
	}
	if final.State == api.StateSucceeded {
		t.Fatalf("%s although %d of 100000 lines of step 1 are missing", describe(final), 100000-lines)
	}
	if final.State != api.StateErrored || final.Reason != api.ReasonExecutor || !strings.Contains(final.Message, "lost") {
		t.Errorf("%s, want errored/executor saying log bytes were lost", describe(final))
	}
	if !strings.Contains(log1, "bytes of this log were lost here") && !strings.Contains(log1, "could not store all of the step's output") {
		t.Errorf("step 1's log (%d bytes) has no marker of the lost bytes; tail:\n%s", len(log1), log1[max(0, len(log1)-400):])
	}
	if !strings.Contains(setup, "step 1 (flood)") || !strings.Contains(setup, "lost") {
		t.Errorf("the setup log does not say step 1 lost log bytes:\n%s", setup)
	}
}

// A step bind-mounts a host directory into its workspace and leaves it
// mounted (chroot and package builds do this by accident). Removing the
// workspace used to delete the contents of the mount's source, outside the
// work directory; now the runner detaches the mount and the host
// directory keeps its files.
func TestE2E_BindMountLeftInWorkspaceKeepsItsSource(t *testing.T) {
	t.Parallel()
	needRoot(t, "bind-mount a directory into a workspace")
	w := newWorld(t, 30*time.Second)
	host := filepath.Join(w.root, "host")
	if err := os.MkdirAll(filepath.Join(host, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"canary", "sub/deep"} {
		if err := os.WriteFile(filepath.Join(host, f), []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := w.registerRunner("r1")
	w.startRunner(r)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: mount and forget
    run: |
      mkdir -p chroot/host
      mount --bind '` + host + `' chroot/host
      ls chroot/host
`})
	final := w.waitFinal(run.ID, 60*time.Second)
	if log := w.stepLog(run.ID, 1); !strings.Contains(log, "canary") {
		testenv.Skipf(t, "skipped: the step could not bind-mount (%s):\n%s", describe(final), log)
	}
	w.waitNoWorkspace(r, run.ID)
	for _, f := range []string{"canary", "sub/deep"} {
		if b, err := os.ReadFile(filepath.Join(host, f)); err != nil || string(b) != "keep me" {
			t.Errorf("the host directory lost %s when the workspace was removed: %q, %v", f, b, err)
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mi), r.work) {
		t.Errorf("a mount below the runner's work directory is left:\n%s", mi)
	}
	if final.State != api.StateSucceeded {
		t.Errorf("%s, want succeeded", describe(final))
	}
}
