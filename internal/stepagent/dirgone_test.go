package stepagent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
)

// TestAgent_ExitsOnceItsDirectoryIsGoneAndNoClientIsConnected pins what a
// cold CI run showed: the knotless-agent of a shell run that was handed
// over at the end of TestDocs_ServerRunnerAndRunsGuidesRunAsWritten lived
// on for more than an hour after the test had removed its directory (it
// waited out the run's deadline and its linger, for a runner that could no
// longer find it: its socket was in that directory). The positive control:
// with its directory in place the agent is still there after 3 s.
func TestAgent_ExitsOnceItsDirectoryIsGoneAndNoClientIsConnected(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts knotless-agent")
	}
	dir := filepath.Join(t.TempDir(), "run-1")
	s := agent.Serve{Dir: dir, Socket: filepath.Join(dir, "agent.sock"), Workdir: t.TempDir(), Run: "run-1",
		Deadline: time.Now().Add(time.Hour)}
	cmd := exec.Command(agenttest.Binary(t), s.Args()...)
	var log syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	testwait.For(t, 30*time.Second, "the agent's socket", func() bool {
		_, err := os.Stat(s.Socket)
		return err == nil
	})
	select {
	case err := <-exited:
		t.Fatalf("the agent exited with its directory in place: %v\n%s", err, log.String())
	case <-time.After(3 * time.Second):
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agent's log:\n%s", log.String())
		}
	})
	testwait.Receive(t, exited, 30*time.Second, "the agent's exit after its directory was removed")
	if !strings.Contains(log.String(), "directory is gone") {
		t.Errorf("the agent's log does not say why it exited:\n%s", log.String())
	}
}
