//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/stepagent"
	"knotless.dev/knotless/internal/testwait"
)

// The output of every step of TestRunStep_ResumesWholeOutputAcrossCuts:
// `seq 1 400000`, 2,688,888 bytes, more than two OutputChunk frames.
const seqLines = 400000

func seqOutput() []byte {
	var b []byte
	for i := 1; i <= seqLines; i++ {
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, '\n')
	}
	return b
}

// noCut and inStarted are a link's cutAt that is not an output byte: the
// connection is not cut; it is cut inside the Started frame.
const (
	noCut     = -1
	inStarted = -2
)

// link is what the test does to one connection RunStep dials.
type link struct {
	// cutAt is a byte of the step's output: the connection is cut inside
	// the output frame that holds it (half that frame's bytes arrive, then
	// the stream ends), or noCut, or inStarted.
	cutAt int64
	// sendStop: while dialing this connection (the last one was cut), the
	// test sends a Stop on RunStep's stop channel.
	sendStop bool
	// awaitStop: the agent's frames after its hello wait until a Stop came
	// over this connection, so the Stop goes on it whatever select picks.
	awaitStop bool
}

// request is a Start or Attach the agent received, and how many Stops
// came after it on its connection.
type request struct {
	kind   string // "start" or "attach"
	offset int64
	chunk  int
	stops  int
}

// TestRunStep_ResumesWholeOutputAcrossCuts holds stepStream's
// reconnection rule (client_step.go) over the real step agent, in
// process (stepagent.Agent.ServeConn over net.Pipe), with a proxy that
// cuts chosen connections inside the output frame that holds a chosen
// byte of the output. In every row: the output arrives whole, in order,
// with no byte repeated or lost; the Exit arrives (exit code 3, or the
// Stop's reason); each connection asks for the output from the bytes
// received so far (a Resumer is told the same offset); and each request
// asks for the frame size the rule gives: a quarter after a connection
// that brought no whole frame, down to 512 bytes; twice after one that
// brought some, up to OutputChunk. Each step is started detached and has
// written all its output before RunStep follows it, so the agent's frames
// are exactly min(chunk, what is left) and every cut falls where the row
// says.
//
// Broken on purpose once each, then restored (the rows that failed):
// shrinking by 2, not 4 (started, floor, regrow, zstd, stop); no
// regrowth (floor, regrow, zstd, stop); a floor of 256 (floor); no
// ceiling (regrow, ceiling); the connection's first offset not reset, so
// that a connection after one with output counts as bringing some
// (regrow); the pending Stop not sent again (stop); Attach before Started
// (started); OutputZstd not decompressed (zstd); Attach one byte past what
// arrived (every row with an Attach); the Exit's code dropped (every row
// but stop).
func TestRunStep_ResumesWholeOutputAcrossCuts(t *testing.T) {
	const oc = agent.OutputChunk
	ag := startAgent(t)
	want := seqOutput()
	for _, c := range []struct {
		name        string
		compression string
		stops       bool // the step sleeps after its output until a Stop ends it
		links       []link
		requests    []request
	}{{
		name:     "a link that holds: one Start from byte 0 for full frames",
		requests: []request{{"start", 0, oc, 0}},
	}, {
		name:  "started: a cut inside Started sends Start again, for frames a quarter the size",
		links: []link{{cutAt: inStarted}},
		requests: []request{
			{"start", 0, oc, 0},
			{"start", 0, oc / 4, 0},
		},
	}, {
		name: "floor: cuts before each first frame shrink it by 4 to 512 bytes and no further; frames that arrive double it",
		links: []link{
			{cutAt: 0}, {cutAt: 0}, {cutAt: 0}, {cutAt: 0}, {cutAt: 0}, {cutAt: 0}, {cutAt: 0},
			{cutAt: 5000}, // frames of 512: [4608, 5120) holds byte 5000
			{cutAt: 7608}, // frames of 1024 from 4608: [6656, 7680) holds byte 7608
		},
		requests: []request{
			{"start", 0, oc, 0},
			{"attach", 0, oc / 4, 0},
			{"attach", 0, oc / 16, 0},
			{"attach", 0, oc / 64, 0},
			{"attach", 0, oc / 256, 0},
			{"attach", 0, oc / 1024, 0},
			{"attach", 0, 512, 0},
			{"attach", 0, 512, 0},
			{"attach", 4608, 1024, 0},
			{"attach", 6656, 2048, 0},
		},
	}, {
		name: "regrow: frames that arrive double the frame size back up to OutputChunk, not past it; a connection that brings none after them shrinks it again",
		links: []link{
			{cutAt: 0},
			{cutAt: 300000},     // frames of oc/4: [oc/4, oc/2) holds byte 300000
			{cutAt: 800000},     // frames of oc/2 from oc/4: [3oc/4, 5oc/4) holds it
			{cutAt: 1900000},    // frames of oc from 3oc/4: [7oc/4, 11oc/4) holds it
			{cutAt: 7 * oc / 4}, // the first frame again: nothing arrives
		},
		requests: []request{
			{"start", 0, oc, 0},
			{"attach", 0, oc / 4, 0},
			{"attach", oc / 4, oc / 2, 0},
			{"attach", 3 * oc / 4, oc, 0},
			{"attach", 7 * oc / 4, oc, 0},
			{"attach", 7 * oc / 4, oc / 4, 0},
		},
	}, {
		name:  "ceiling: a cut after a whole frame at full size keeps full frames",
		links: []link{{cutAt: oc + 1}},
		requests: []request{
			{"start", 0, oc, 0},
			{"attach", oc, oc, 0},
		},
	}, {
		name:        "zstd: compressed frames are cut, resumed and decompressed alike",
		compression: agent.CompressionZstd,
		links: []link{
			{cutAt: 1000000}, // the first frame, [0, oc)
			{cutAt: 1500000}, // frames of oc/4: [5oc/4, 6oc/4) holds it
		},
		requests: []request{
			{"start", 0, oc, 0},
			{"attach", 0, oc / 4, 0},
			{"attach", 5 * oc / 4, oc / 2, 0},
		},
	}, {
		name:  "stop: a Stop sent while a connection was cut goes on the next one, and again on the one after",
		stops: true,
		links: []link{
			{cutAt: 100000},
			{cutAt: 2000000, sendStop: true, awaitStop: true}, // frames of oc/4: [7oc/4, 8oc/4) holds it
			{cutAt: noCut, awaitStop: true},
		},
		requests: []request{
			{"start", 0, oc, 0},
			{"attach", 0, oc / 4, 1},
			{"attach", 7 * oc / 4, oc / 2, 1},
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("step-%d", time.Now().UnixNano())
			st := agent.Start{ID: id, Shell: []string{"/bin/sh", "-e"}, Compression: c.compression,
				Script: []byte(fmt.Sprintf("seq 1 %d\nexit 3\n", seqLines))}
			if c.stops {
				st.Script = []byte(fmt.Sprintf("seq 1 %d\nexec sleep 600\n", seqLines))
			}
			ag.startAndWaitForOutput(t, st, int64(len(want)), !c.stops)

			p := &proxy{t: t, agent: ag.a, links: c.links, stop: make(chan agent.Stop, 1), stepID: id}
			cl := agent.NewClient(p.dial, agent.Options{Name: "test", Logger: discard})
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ex, err := cl.RunStep(ctx, st, &p.out, p.stop)
			if err != nil {
				t.Fatalf("RunStep: %v", err)
			}

			p.mu.Lock()
			defer p.mu.Unlock()
			if got := p.out.buf.Bytes(); !bytes.Equal(got, want) {
				t.Errorf("output: %d bytes, want %d; first difference at byte %d", len(got), len(want), firstDiff(got, want))
			}
			if c.stops {
				if ex.Reason != "cancelled" {
					t.Errorf("exit %+v: want the Stop's reason, cancelled", ex)
				}
			} else if ex.ExitCode != 3 || ex.Reason != "" {
				t.Errorf("exit %+v: want exit code 3", ex)
			}
			if fmt.Sprint(p.requests) != fmt.Sprint(c.requests) {
				t.Errorf("requests (kind, offset, chunk, Stops after it), one per connection:\n got %v\nwant %v", p.requests, c.requests)
			}
			// Each connection asks from the bytes received when it was
			// dialed, and a Resumer hears the same offset of each
			// connection after a cut of a started step.
			var resumed []int64
			for k, r := range p.requests {
				if k < len(p.received) && r.offset != p.received[k] {
					t.Errorf("connection %d asks from byte %d; %d had arrived", k, r.offset, p.received[k])
				}
				if k > 0 && r.kind == "attach" {
					resumed = append(resumed, r.offset)
				}
			}
			if fmt.Sprint(p.out.resumed) != fmt.Sprint(resumed) {
				t.Errorf("Resumer told offsets %v, want %v", p.out.resumed, resumed)
			}
			if c.compression != "" && p.zstdFrames == 0 {
				t.Errorf("no OutputZstd frame went: the row tests nothing of it")
			}
		})
	}
}

// TestRunStep_AChattyStepsOutputGoesInAtMostTenFramesASecond: a step that
// writes a line every few milliseconds has its output sent in frames that
// each wait up to 100 ms for more (stepagent's coalesceDelay), all of it,
// in order. With a wait of 2 ms every write was a frame: 25 steps writing
// 1 MB/s in 20 ms pieces made ~41 frames a second each, and their agents
// took 0.73 of the node's 2 cores (docs/scaling.md "Log streams through
// the API server").
func TestRunStep_AChattyStepsOutputGoesInAtMostTenFramesASecond(t *testing.T) {
	ag := startAgent(t)
	const lines = 300
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	id := fmt.Sprintf("chatty-%d", time.Now().UnixNano())
	st := agent.Start{ID: id, Shell: []string{"/bin/sh", "-e"}, Compression: agent.CompressionZstd,
		Script: []byte(fmt.Sprintf("i=1\nwhile [ $i -le %d ]; do echo $i; i=$((i+1)); sleep 0.005; done\n", lines))}
	p := &proxy{t: t, agent: ag.a, stop: make(chan agent.Stop, 1), stepID: id}
	cl := agent.NewClient(p.dial, agent.Options{Name: "test", Logger: discard})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	ex, err := cl.RunStep(ctx, st, &p.out, p.stop)
	if err != nil {
		t.Fatalf("RunStep: %v", err)
	}
	took := time.Since(start)
	p.mu.Lock()
	defer p.mu.Unlock()
	if ex.ExitCode != 0 || !bytes.Equal(p.out.buf.Bytes(), want.Bytes()) {
		t.Fatalf("exit %+v, output %q: want exit 0 and the %d lines in order", ex, p.out.buf.String(), lines)
	}
	// At most one frame per 100 ms while it writes, and the last one
	// after the exit: 10 a second and a few, never one per write.
	if most := int(took/(100*time.Millisecond)) + 3; p.frames > most {
		t.Errorf("%d output frames for %d writes over %v: want at most %d (one per 100 ms, and the last)", p.frames, lines, took.Round(time.Millisecond), most)
	}
	t.Logf("%d writes over %v: %d output frames", lines, took.Round(time.Millisecond), p.frames)
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// testAgent is the step agent in this process, and a client of the test's
// own for setting up steps.
type testAgent struct {
	a  *stepagent.Agent
	cl *agent.Client
}

// The step agent of this test binary: one per process, made on first use
// (it becomes the process's child subreaper, and its reaper waits for
// every child: a test of this package that started processes of its own
// would lose their exit statuses to it). TestMain shuts it down.
var (
	agentOnce   sync.Once
	sharedAgent *stepagent.Agent
	sharedDir   string
	agentErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedAgent != nil {
		sharedAgent.Shutdown()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

func startAgent(t *testing.T) *testAgent {
	agentOnce.Do(func() {
		if sharedDir, agentErr = os.MkdirTemp("", "knotless-runstep-test-"); agentErr != nil {
			return
		}
		sharedAgent, agentErr = stepagent.New(stepagent.Config{Dir: sharedDir, Workdir: sharedDir, Run: "run-1", NoCgroups: true, Logger: discard})
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	// Through a proxy that cuts nothing: on one net.Pipe, the handshake's
	// two sides would each block writing their preamble.
	setup := &proxy{t: t, agent: sharedAgent}
	cl := agent.NewClient(setup.dial, agent.Options{Name: "setup", Logger: discard})
	t.Cleanup(func() { _ = cl.Close() })
	return &testAgent{a: sharedAgent, cl: cl}
}

// startAndWaitForOutput starts st detached and waits until its output is
// size bytes (and, when exits, it has exited): the agent then sends frames
// of exactly min(chunk, what is left).
func (ta *testAgent) startAndWaitForOutput(t *testing.T, st agent.Start, size int64, exits bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ta.cl.StartDetached(ctx, st); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the step's whole output", func() (bool, string) {
		steps, err := ta.cl.Steps(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range steps {
			if s.ID == st.ID {
				return s.Size == size && (s.Exit != nil) == exits, fmt.Sprintf("%+v", s)
			}
		}
		return false, "no such step"
	})
}

// proxy dials the agent for RunStep through a frame-by-frame relay that
// records the requests and cuts connections as links say.
type proxy struct {
	t      *testing.T
	agent  *stepagent.Agent
	links  []link
	stop   chan agent.Stop
	stepID string

	mu         sync.Mutex
	out        output
	requests   []request
	received   []int64 // output bytes RunStep had when it dialed connection k
	zstdFrames int
	frames     int // Output and OutputZstd frames relayed
}

// output is RunStep's writer: the output and the offsets it was told as a
// Resumer.
type output struct {
	buf     bytes.Buffer
	resumed []int64
}

func (o *output) Write(b []byte) (int, error) { return o.buf.Write(b) }

func (o *output) Resumed(offset int64, _ error) { o.resumed = append(o.resumed, offset) }

func (p *proxy) dial(context.Context) (io.ReadWriteCloser, error) {
	p.mu.Lock()
	k := len(p.received)
	p.received = append(p.received, int64(p.out.buf.Len()))
	p.mu.Unlock()
	l := link{cutAt: noCut}
	if k < len(p.links) {
		l = p.links[k]
	}
	if l.sendStop {
		p.stop <- agent.Stop{ID: p.stepID, Reason: "cancelled", GraceMS: 0}
	}
	client, fromClient := net.Pipe()
	toAgent, agentEnd := net.Pipe()
	go p.agent.ServeConn(agentEnd)
	gone := make(chan struct{})
	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			_, _ = fromClient.Close(), toAgent.Close()
			close(gone)
		})
	}
	stopSeen := make(chan struct{})
	go p.clientToAgent(k, fromClient, toAgent, stopSeen, closeAll)
	go p.agentToClient(l, toAgent, fromClient, stopSeen, gone, closeAll)
	return client, nil
}

// clientToAgent relays the client's frames, recording Start, Attach and
// Stop (as connection k's).
func (p *proxy) clientToAgent(k int, from, to net.Conn, stopSeen chan struct{}, closeAll func()) {
	defer closeAll()
	fr, fw := agent.NewFrameReader(from), agent.NewFrameWriter(to)
	if fr.ReadPreamble() != nil || fw.WriteRaw(agent.Preamble) != nil {
		return
	}
	for {
		t, b, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch t {
		case agent.TypeStart, agent.TypeAttach:
			var r agent.Attach // Start's ID, Offset and Chunk have the same JSON names
			if err := agent.Decode(t, b, &r); err == nil && r.ID == p.stepID {
				p.mu.Lock()
				for len(p.requests) < k {
					p.requests = append(p.requests, request{kind: "none"})
				}
				p.requests = append(p.requests, request{kind: t.String(), offset: r.Offset, chunk: r.Chunk})
				p.mu.Unlock()
			}
		case agent.TypeStop:
			p.mu.Lock()
			if k < len(p.requests) {
				p.requests[k].stops++
			}
			p.mu.Unlock()
			select {
			case <-stopSeen:
			default:
				close(stopSeen)
			}
		}
		if fw.WriteFrame(t, b) != nil {
			return
		}
	}
}

// agentToClient relays the agent's frames and cuts the connection as l
// says: half of the frame to cut arrives, then the stream ends.
func (p *proxy) agentToClient(l link, from, to net.Conn, stopSeen, gone chan struct{}, closeAll func()) {
	defer closeAll()
	fr := agent.NewFrameReader(from)
	if fr.ReadPreamble() != nil {
		return
	}
	if _, err := io.WriteString(to, agent.Preamble); err != nil {
		return
	}
	var raw bytes.Buffer
	fw := agent.NewFrameWriter(&raw) // one frame's bytes at a time, as the agent wrote them
	for n := 0; ; n++ {
		t, b, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if n == 1 && l.awaitStop { // past the hello
			select {
			case <-stopSeen:
			case <-gone:
				return
			case <-time.After(10 * time.Second):
				p.t.Errorf("no Stop came over a connection that awaits one")
			}
		}
		raw.Reset()
		if err := fw.WriteFrame(t, b); err != nil {
			return
		}
		cut := t == agent.TypeStarted && l.cutAt == inStarted
		if t == agent.TypeOutput || t == agent.TypeOutputZstd {
			off, size := p.outputRange(t, b)
			cut = off <= l.cutAt && l.cutAt < off+size
		}
		if cut {
			_, _ = to.Write(raw.Bytes()[:raw.Len()/2])
			return
		}
		if _, err := to.Write(raw.Bytes()); err != nil {
			return
		}
	}
}

// outputRange is the output bytes an Output or OutputZstd frame carries:
// from offset off, size of them.
func (p *proxy) outputRange(t agent.Type, b []byte) (off, size int64) {
	_, off, data, err := agent.DecodeOutput(b)
	if err != nil {
		p.t.Errorf("output frame: %v", err)
		return 0, 0
	}
	p.mu.Lock()
	p.frames++
	p.mu.Unlock()
	if t == agent.TypeOutputZstd {
		p.mu.Lock()
		p.zstdFrames++
		p.mu.Unlock()
		if data, err = agent.DecompressOutput(nil, data); err != nil {
			p.t.Errorf("output-zstd frame: %v", err)
		}
	}
	return off, int64(len(data))
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
