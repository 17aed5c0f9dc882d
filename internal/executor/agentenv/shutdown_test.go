package agentenv_test

import (
	"context"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/agent/agenttest"
)

// TestLocal_ShutdownAnswerArrivesThroughABridgeThatDiesWithTheAgent: in a
// job pod the client reaches the agent through an exec's `knotless-agent
// connect`, which dies with the agent (PID 1). An agent that exited as
// soon as it had written ShutdownDone could cut its answer off in that
// bridge: the client then dialled again into a pod being torn down,
// logged that it could not reach the agent, and the pod's removal took
// ~250 ms longer (BenchmarkKube_Lifecycle's end-to-gone now and then). Here
// the bridge passes the agent's bytes on 50 ms late and drops whatever it
// holds when the agent exits: the agent must wait for the client to close
// before it exits, so Shutdown succeeds on its one connection.
func TestLocal_ShutdownAnswerArrivesThroughABridgeThatDiesWithTheAgent(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "agent.sock")
	serve := agent.Serve{Run: "shutdown-bridge", Dir: dir, Socket: socket, Workdir: dir, Home: dir}
	cmd := exec.Command(agenttest.Binary(t), serve.Args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	var dials atomic.Int32
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		dials.Add(1)
		var up net.Conn
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			select {
			case <-exited:
				return nil, agent.ErrGone
			default:
			}
			if up, err = agent.DialUnix(ctx, socket); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		bridge, client := net.Pipe()
		go func() { // client → agent, at once
			_, _ = io.Copy(up, bridge)
			_ = up.(*net.UnixConn).CloseWrite()
		}()
		go func() { // agent → client, 50 ms late, lost once the agent exited
			defer bridge.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := up.Read(buf)
				if n > 0 {
					select {
					case <-time.After(50 * time.Millisecond):
					case <-exited:
						return
					}
					select {
					case <-exited:
						return
					default:
					}
					if _, werr := bridge.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		return client, nil
	}
	c := agent.NewClient(dial, agent.Options{Name: "test", Retry: 3 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v (the answer was lost in the bridge)", err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d dials, want 1: the client dialled again after asking the agent to shut down", n)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("the agent did not exit within 10 s of its client closing")
	}
}
