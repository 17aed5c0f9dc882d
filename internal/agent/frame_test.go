package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func frames(t *testing.T, parts ...[]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	fw := NewFrameWriter(&b)
	for _, p := range parts {
		if err := fw.WriteFrame(TypeOutput, p); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestFrames_RoundTripKeepsTypeAndBytes(t *testing.T) {
	payloads := [][]byte{nil, []byte("a"), bytes.Repeat([]byte{0, 0xff, '\n'}, 1000)}
	fr := NewFrameReader(bytes.NewReader(frames(t, payloads...)))
	for i, want := range payloads {
		typ, got, err := fr.ReadFrame()
		if err != nil || typ != TypeOutput || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %v %v %q, want output %q", i, typ, err, got, want)
		}
	}
	if _, _, err := fr.ReadFrame(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// A stream cut at any byte inside a frame is a cut (io.ErrUnexpectedEOF),
// never a shorter frame or a clean end.
func TestFrames_CutAtEveryByteIsDetected(t *testing.T) {
	stream := frames(t, []byte("first"), []byte("second frame"))
	firstLen := headerLen + len("first") + trailerLen
	for cut := 1; cut < len(stream); cut++ {
		fr := NewFrameReader(bytes.NewReader(stream[:cut]))
		n := 0
		var err error
		for err == nil {
			_, _, err = fr.ReadFrame()
			if err == nil {
				n++
			}
		}
		switch {
		case cut == firstLen:
			if n != 1 || !errors.Is(err, io.EOF) {
				t.Errorf("cut between frames (at %d): %d frames, %v; want 1 and io.EOF", cut, n, err)
			}
		case !errors.Is(err, io.ErrUnexpectedEOF):
			t.Errorf("cut at byte %d: %d frames, then %v; want io.ErrUnexpectedEOF", cut, n, err)
		}
	}
}

func TestFrames_FlippedByteFailsTheChecksum(t *testing.T) {
	stream := frames(t, []byte("payload that matters"))
	for i := range stream {
		bad := bytes.Clone(stream)
		bad[i] ^= 0x20
		_, _, err := NewFrameReader(bytes.NewReader(bad)).ReadFrame()
		if err == nil {
			t.Fatalf("byte %d flipped: frame accepted", i)
		}
	}
}

func TestPreamble_AShellErrorIsNotAnAgentAndIsQuoted(t *testing.T) {
	fr := NewFrameReader(strings.NewReader("sh: knotless-agent: not found\n"))
	err := fr.ReadPreamble()
	if !errors.Is(err, ErrNotAgent) || !strings.Contains(err.Error(), "sh: knotless-agent: not found") {
		t.Fatalf("err = %v, want ErrNotAgent quoting what was sent", err)
	}
	if err := NewFrameReader(strings.NewReader("KNOTLESS-AG")).ReadPreamble(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("preamble cut short: %v, want io.ErrUnexpectedEOF (a broken stream, not a stranger)", err)
	}
}

// socketPair returns two connected Unix sockets (buffered, as real streams
// are; net.Pipe is not).
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

func TestHandshake_NoCommonVersionIsRefusedWithBothVersions(t *testing.T) {
	a, b := socketPair(t)
	go func() {
		_, _, _ = AgentHandshake(context.Background(), b, func(ClientHello) AgentHello { return AgentHello{Agent: "test"} }, 0, 0)
	}()
	_, _, err := ClientHandshake(context.Background(), a, ClientHello{Versions: []int{99}}, 0, 0)
	if err == nil || !strings.Contains(err.Error(), "99") {
		t.Fatalf("err = %v, want a refusal naming the versions", err)
	}
}

// A silent connection is taken for dead after DeadAfter: the watchdog
// closes it, so a client never waits forever on a stream a proxy dropped
// without closing.
func TestConn_SilentConnectionIsClosedAfterDeadAfter(t *testing.T) {
	a, b := socketPair(t)
	go func() { _, _ = io.Copy(io.Discard, b) }() // reads, never answers
	cn := newConn(a, NewFrameReader(a), NewFrameWriter(a), 20*time.Millisecond, 100*time.Millisecond)
	select {
	case <-cn.Done():
		if !errors.Is(cn.Err(), ErrDead) {
			t.Fatalf("err = %v, want ErrDead", cn.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a silent connection stayed open")
	}
}

// TestConn_ReadsAtMostAFewFramesAheadOfItsReader pins how far the
// connection's reader runs ahead of whoever takes its frames: frameQueue
// frames waiting and one in hand, then the sender waits. It used to be 16
// frames (16 MiB of output), and the runner then wrote each frame to its
// spool long after the socket's copy had left the CPU's cache.
func TestConn_ReadsAtMostAFewFramesAheadOfItsReader(t *testing.T) {
	a, b := net.Pipe() // unbuffered: a frame is sent only when it is read
	cn := newConn(a, NewFrameReader(a), NewFrameWriter(a), time.Hour, time.Hour)
	defer cn.Close()
	defer b.Close()
	fw := NewFrameWriter(b)
	var sent atomic.Int32
	go func() {
		payload := make([]byte, OutputChunk)
		for i := byte(0); ; i++ {
			payload[0] = i
			if err := fw.WriteFrame(TypeOutput, payload); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	ahead := int32(frameQueue + 1)
	deadline := time.Now().Add(5 * time.Second)
	for sent.Load() < ahead && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // would the reader take more?
	if n := sent.Load(); n != ahead {
		t.Fatalf("with nobody taking frames, %d were sent; want %d (frameQueue waiting, one in hand)", n, ahead)
	}
	for i := range 2 * ahead {
		select {
		case f := <-cn.Frames():
			if f.Type != TypeOutput || len(f.Payload) != OutputChunk || f.Payload[0] != byte(i) {
				t.Fatalf("frame %d: %s of %d bytes starting %d", i, f.Type, len(f.Payload), f.Payload[0])
			}
			f.Release()
		case <-time.After(5 * time.Second):
			t.Fatalf("frame %d did not arrive once frames were taken", i)
		}
	}
}

func TestTar_RoundTripAndPathsThatLeaveTheTreeAreRefused(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "d", "f"), []byte("data"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTar(context.Background(), &b, HostTree{}, src); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if n, err := ExtractTar(context.Background(), bytes.NewReader(b.Bytes()), HostTree{}, dst); err != nil || n != 4 {
		t.Fatalf("extract: %d entries, %v", n, err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "d", "f")); err != nil || string(got) != "data" {
		t.Fatalf("copied file: %q %v", got, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "../../outside" {
		t.Fatalf("copied link: %q %v (links stay links)", target, err)
	}
	for _, name := range []string{"../x", "/etc/x", "./a/../../x", "x"} {
		if _, err := entryPath(name); err == nil {
			t.Errorf("entry %q accepted; it leaves the tree or is not below it", name)
		}
	}
	// Relative paths are confined to the workdir, also through a link.
	ws := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	// ResolveIn refuses it (confined); were it to pass, the os.Root would.
	if tree, name, closeTree, err := ResolveIn(ws, "out/planted"); err == nil {
		defer closeTree()
		if _, err := ExtractTar(context.Background(), bytes.NewReader(b.Bytes()), tree, name); err == nil {
			t.Errorf("extracting through a link that leaves the workspace succeeded")
		}
	} else if !strings.Contains(err.Error(), "escapes from the workspace") {
		t.Errorf("ResolveIn through a link that leaves the workspace: %v", err)
	}
	if _, _, _, err := ResolveIn(ws, "../x"); err == nil {
		t.Errorf("a relative path that leaves the workspace was accepted")
	}
}
