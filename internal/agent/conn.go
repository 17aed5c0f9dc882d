package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Heartbeat timing defaults: a side sends a Heartbeat frame every
// DefaultHeartbeat, and takes a connection for dead after DefaultDeadAfter
// without any frame from the other side.
const (
	DefaultHeartbeat = 5 * time.Second
	DefaultDeadAfter = 20 * time.Second
)

// Frame is a received frame; Payload is its own memory, valid until
// Release.
type Frame struct {
	Type    Type
	Payload []byte
	pooled  *[]byte // Payload's buffer when it came from payloads
}

// Release hands a large payload's memory back for later frames; Payload
// must not be used afterwards. Calling it is optional (a frame never
// released is collected); calling it twice is a bug.
func (f Frame) Release() {
	if f.pooled != nil {
		payloads.Put(f.pooled)
	}
}

// payloads recycles the buffers of large frames (Output, Data), which a
// chatty step sends back to back.
var payloads sync.Pool

// pooledMin is the smallest payload read into a pooled buffer; smaller
// frames (JSON, heartbeats) get their own.
const pooledMin = 32 << 10

// payloadBuffer returns a buffer of need bytes: from payloads when need is
// large, with its pool pointer, else a new one.
func payloadBuffer(need int) ([]byte, *[]byte) {
	if need < pooledMin {
		return make([]byte, need), nil
	}
	if p, ok := payloads.Get().(*[]byte); ok && cap(*p) >= need {
		return (*p)[:need], p
	}
	b := make([]byte, need, max(need, MaxPayload+trailerLen))
	return b, &b
}

// Conn is one handshaken connection, used by both sides: a reader goroutine
// delivers frames on Frames, a heartbeat goroutine sends Heartbeat frames,
// and a watchdog closes the stream when nothing arrived for DeadAfter.
// Heartbeat frames are consumed here and never delivered.
type Conn struct {
	rwc io.ReadWriteCloser
	fr  *FrameReader
	fw  *FrameWriter

	frames   chan Frame
	done     chan struct{} // closed when the reader stops
	err      error         // why the reader stopped; set before done closes
	lastRecv atomic.Int64  // UnixNano of the last frame received
	closed   atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
	deadMsg  atomic.Pointer[string]
}

// ErrDead is wrapped by Conn errors when the watchdog gave up on a silent
// connection.
var ErrDead = errors.New("agent protocol: connection silent for too long")

// newConn wraps rwc after the preambles were exchanged (the hello frames
// are read by the caller through Frames).
func newConn(rwc io.ReadWriteCloser, fr *FrameReader, fw *FrameWriter, heartbeat, deadAfter time.Duration) *Conn {
	if heartbeat <= 0 {
		heartbeat = DefaultHeartbeat
	}
	if deadAfter <= 0 {
		deadAfter = DefaultDeadAfter
	}
	c := &Conn{rwc: rwc, fr: fr, fw: fw, frames: make(chan Frame, frameQueue), done: make(chan struct{}), stop: make(chan struct{})}
	c.lastRecv.Store(time.Now().UnixNano())
	go c.readLoop()
	go c.beat(heartbeat, deadAfter)
	return c
}

// frameQueue is how many received frames wait for their reader. Few: a
// frame of output (up to 1 MiB) is best handled while it is still in the
// CPU's cache from the socket's copy; with 16 waiting, the runner wrote
// each one to its spool from memory, not from the cache, and a 100 MB log
// took it ~12% longer end to end (docs/benchmarks.md, 2026-12-03).
const frameQueue = 2

func (c *Conn) readLoop() {
	defer close(c.done)
	defer close(c.frames)
	for {
		// Each payload is read into a buffer of its own: it is handed over
		// on the channel, no copy needed.
		var pooled *[]byte
		t, p, err := c.fr.readFrame(func(need int) []byte {
			var b []byte
			b, pooled = payloadBuffer(need)
			return b
		})
		if err != nil {
			if pooled != nil {
				payloads.Put(pooled)
			}
			if m := c.deadMsg.Load(); m != nil {
				err = fmt.Errorf("%w: %s", ErrDead, *m)
			} else if c.closed.Load() {
				err = fmt.Errorf("agent protocol: connection closed: %w", err)
			}
			c.err = err
			return
		}
		c.lastRecv.Store(time.Now().UnixNano())
		if t == TypeHeartbeat {
			continue
		}
		select {
		case c.frames <- Frame{Type: t, Payload: p, pooled: pooled}:
		case <-c.stop:
			c.err = errors.New("agent protocol: connection closed")
			return
		}
	}
}

func (c *Conn) beat(every, deadAfter time.Duration) {
	tick := time.NewTicker(min(every, deadAfter/2))
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-c.stop:
			return
		case <-c.done:
			return
		case now := <-tick.C:
			if now.Sub(time.Unix(0, c.lastRecv.Load())) > deadAfter {
				msg := fmt.Sprintf("no frame for %s", deadAfter)
				c.deadMsg.Store(&msg)
				_ = c.Close()
				return
			}
			if now.Sub(last) >= every {
				last = now
				if err := c.fw.WriteFrame(TypeHeartbeat); err != nil {
					_ = c.Close()
					return
				}
			}
		}
	}
}

// Frames delivers received frames (heartbeats excluded) until the
// connection ends; then it is closed and Err says why.
func (c *Conn) Frames() <-chan Frame { return c.frames }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (valid once Done is closed).
func (c *Conn) Err() error {
	<-c.done
	return c.err
}

// Write sends one frame.
func (c *Conn) Write(t Type, parts ...[]byte) error { return c.fw.WriteFrame(t, parts...) }

// WriteJSON sends one JSON frame.
func (c *Conn) WriteJSON(t Type, v any) error { return c.fw.WriteJSON(t, v) }

// Close ends the connection; the reader stops. Idempotent.
func (c *Conn) Close() error {
	c.closed.Store(true)
	c.stopOnce.Do(func() { close(c.stop) })
	return c.rwc.Close()
}

// next returns the next frame, or an error when the connection ended or
// ctx is done.
func (c *Conn) next(ctx context.Context) (Frame, error) {
	select {
	case f, ok := <-c.frames:
		if !ok {
			return Frame{}, c.Err()
		}
		return f, nil
	case <-ctx.Done():
		return Frame{}, ctx.Err()
	}
}
