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

// Frame is a received frame; Payload is its own copy.
type Frame struct {
	Type    Type
	Payload []byte
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
	c := &Conn{rwc: rwc, fr: fr, fw: fw, frames: make(chan Frame, 16), done: make(chan struct{}), stop: make(chan struct{})}
	c.lastRecv.Store(time.Now().UnixNano())
	go c.readLoop()
	go c.beat(heartbeat, deadAfter)
	return c
}

func (c *Conn) readLoop() {
	defer close(c.done)
	defer close(c.frames)
	for {
		t, p, err := c.fr.ReadFrame()
		if err != nil {
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
		case c.frames <- Frame{t, append([]byte(nil), p...)}:
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
