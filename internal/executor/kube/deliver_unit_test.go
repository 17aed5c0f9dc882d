package kube

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The delivery script, run by real shells with the pod's paths moved to a
// temporary directory, writes the program byte for byte whatever its size
// against dd's 64 KiB blocks, with dd and where the image's dd fails before
// reading (an unknown flag, or no dd at all: head -c alone), checks its
// size with stat or, where stat fails, wc -c, and then execs it with the
// connect arguments. The "agent" is a shell script that
// prints its arguments.
func TestDeliverScript_WritesTheAgentWholeWithAndWithoutDD(t *testing.T) {
	shells := [][]string{{"sh"}}
	if _, err := exec.LookPath("busybox"); err == nil {
		shells = append(shells, []string{"busybox", "sh"})
	}
	noDD := t.TempDir()
	if err := os.WriteFile(filepath.Join(noDD, "dd"), []byte("#!/bin/sh\necho 'dd: unknown operand iflag=fullblock' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noStat := t.TempDir()
	if err := os.WriteFile(filepath.Join(noStat, "stat"), []byte("#!/bin/sh\necho 'stat: unrecognized option: c' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sh := range shells {
		for _, path := range []struct{ name, prefix string }{{"dd", ""}, {"no usable dd", noDD + ":"}, {"no usable dd or stat", noDD + ":" + noStat + ":"}} {
			for _, pad := range []int{0, 1, 65536 - 70, 65536*3 + 5} {
				t.Run(fmt.Sprintf("%s/%s/%d", strings.Join(sh, " "), path.name, pad), func(t *testing.T) {
					dir := t.TempDir()
					script := strings.ReplaceAll(deliverScript(), AgentDir+"/", dir+"/")
					agent := []byte("#!/bin/sh\necho agent-ran \"$@\"\nexit 0\n#")
					agent = append(agent, bytes.Repeat([]byte{'x'}, pad)...)
					agent = append(agent, '\n')
					cmd := exec.Command(sh[0], append(sh[1:], "-c", script)...)
					cmd.Env = []string{"PATH=" + path.prefix + os.Getenv("PATH")}
					in, err := cmd.StdinPipe()
					if err != nil {
						t.Fatal(err)
					}
					outPipe, err := cmd.StdoutPipe()
					if err != nil {
						t.Fatal(err)
					}
					var stderr bytes.Buffer
					cmd.Stderr = &stderr
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					out := bufio.NewReader(outPipe)
					line, _ := out.ReadString('\n')
					if !strings.HasPrefix(line, lineSendAgent+" ") {
						t.Fatalf("first line %q, want %s MACHINE; stderr %s", line, lineSendAgent, stderr.String())
					}
					fmt.Fprintf(in, "%d\n", len(agent))
					in.Write(agent)
					// Nothing more until the script says it has the program,
					// as the runner does.
					if line, _ = out.ReadString('\n'); line != lineDelivered+"\n" {
						t.Fatalf("after the program: %q, want %s; stderr %s", line, lineDelivered, stderr.String())
					}
					in.Close()
					rest, _ := out.ReadString('\n')
					if err := cmd.Wait(); err != nil {
						t.Fatalf("script: %v; stderr %s", err, stderr.String())
					}
					if !strings.HasPrefix(rest, "agent-ran connect ") {
						t.Errorf("the program ran as %q, want agent-ran connect ...", rest)
					}
					got, err := os.ReadFile(filepath.Join(dir, "knotless-agent"))
					if err != nil || !bytes.Equal(got, agent) {
						t.Errorf("program written: %d bytes (%v), want %d, the same", len(got), err, len(agent))
					}
					if fi, err := os.Stat(filepath.Join(dir, "knotless-agent")); err != nil || fi.Mode().Perm() != 0o500 {
						t.Errorf("program mode %v, %v; want 0500", fi.Mode(), err)
					}
				})
			}
		}
	}
}

// The delivery wakes PID 1 itself once the program is in place, before
// the connect starts (so the two programs start side by side): a reader
// of the start pipe, held open read-write as PID 1 holds it, finds a line
// there although the "agent" here never wakes anyone.
func TestDeliverScript_WakesPID1BeforeTheConnectStarts(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "start")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	pid1, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pid1.Close()
	script := strings.ReplaceAll(deliverScript(), AgentDir+"/", dir+"/")
	agent := []byte("#!/bin/sh\necho agent-ran \"$@\"\n")
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin = io.MultiReader(strings.NewReader(fmt.Sprintf("%d\n", len(agent))), bytes.NewReader(agent))
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "agent-ran connect ") {
		t.Fatalf("script: %v; output %q", err, out)
	}
	if err := pid1.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(pid1).ReadString('\n')
	if line != "go\n" {
		t.Fatalf("the start pipe held %q (%v), want the delivery's wake-up line", line, err)
	}
}

// An agent sent before the pod asked names its machine on the size line:
// a pod of another machine ends (97) before it reads a byte of it, so
// nothing is written there to run; a pod without uname takes it, as it
// takes the agent of the machine the node's earlier pods reported.
func TestDeliverScript_RefusesAnAgentSentForAnotherMachine(t *testing.T) {
	host, err := exec.Command("uname", "-m").Output()
	if err != nil {
		t.Fatal(err)
	}
	other := "aarch64"
	if strings.TrimSpace(string(host)) == other {
		other = "x86_64"
	}
	noUname := t.TempDir()
	if err := os.WriteFile(filepath.Join(noUname, "uname"), []byte("#!/bin/sh\nexit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	agent := []byte("#!/bin/sh\necho agent-ran \"$@\"\n")
	for _, c := range []struct {
		name, pathPrefix string
		wantRan          bool
	}{{"another machine", "", false}, {"no uname", noUname + ":", true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command("sh", "-c", strings.ReplaceAll(deliverScript(), AgentDir+"/", dir+"/"))
			cmd.Env = []string{"PATH=" + c.pathPrefix + os.Getenv("PATH")}
			cmd.Stdin = io.MultiReader(strings.NewReader(fmt.Sprintf("%d %s\n", len(agent), other)), bytes.NewReader(agent))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			_, statErr := os.Stat(filepath.Join(dir, "knotless-agent"))
			if c.wantRan {
				if err != nil || !strings.Contains(string(out), "agent-ran connect ") {
					t.Fatalf("script: %v; output %q; stderr %s", err, out, stderr.String())
				}
				return
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 97 || !strings.Contains(stderr.String(), "an agent for machine "+other+" was sent") {
				t.Fatalf("script: %v (want exit 97); output %q; stderr %s", err, out, stderr.String())
			}
			if statErr == nil {
				t.Errorf("the agent for %s was written into the pod", other)
			}
		})
	}
}
