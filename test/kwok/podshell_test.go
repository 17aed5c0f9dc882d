package kwok

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"knotless.dev/knotless/internal/testenv"
)

// TestPodShell_EachPodHasItsOwnRootAsItsUser pins what lets the real
// agent serve kwok's fake pods: two pods' shells each see their own
// /knotless (a file one writes is not in the other's), run as the pod's
// UID, and find the real shell at /bin/sh inside; without the pod's
// directory it is the real shell. Broken, every pod would share this
// machine's /knotless and the second pod's delivery would find the
// first's agent socket.
func TestPodShell_EachPodHasItsOwnRootAsItsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "needs root (mount namespaces, chroot)")
	}
	testenv.LookPath(t, "unshare", "util-linux")
	c := &ControlPlane{Dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(c.Dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	shell, err := c.writePodShell()
	if err != nil {
		t.Fatal(err)
	}
	run := func(env []string, script string) string {
		t.Helper()
		cmd := exec.Command(shell, "-c", script)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	a, b := filepath.Join(c.Dir, "pods", "a"), filepath.Join(c.Dir, "pods", "b")
	if got := run([]string{PodDirEnv + "=" + a, PodUserEnv + "=1000:1000"}, "echo $(id -u) > /knotless/who; cat /knotless/who; ls /knotless; test -x /bin/sh && echo sh"); got != "1000\nwho\nsh" {
		t.Errorf("pod a: %q, want its uid, its file and a shell", got)
	}
	if got := run([]string{PodDirEnv + "=" + b}, "ls -A /knotless; id -u"); got != "0" {
		t.Errorf("pod b sees %q in /knotless (want nothing, then uid 0)", got)
	}
	fi, err := os.Stat(filepath.Join(a, "knotless", "who"))
	if err != nil {
		t.Fatalf("pod a's file is not in its directory: %v", err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 1000 {
		t.Errorf("pod a's file is owned by %d, want 1000", uid)
	}
	if got := run(nil, "echo plain"); got != "plain" {
		t.Errorf("without a pod: %q", got)
	}
}
