package agent

import (
	"context"
	"fmt"
	"io"
)

// Resumer is implemented by a RunStep output writer that is told where the
// step's output goes on after its connection dropped and a new one took
// over: from byte offset of the output, after err. RunStep calls it
// before writing the resumed output, once per new connection.
type Resumer interface {
	Resumed(offset int64, err error)
}

// RunStep starts st (or attaches to it when the agent has it already) and
// writes its output from st.Offset on to out, then returns its Exit. When
// out is a Resumer, it learns of each new connection the output resumed
// on.
//
// Each Stop received on stop is sent to the agent (and sent again after a
// reconnect); the output is followed until the step exits. ctx ends the
// following, not the step: RunStep returns ctx's error and the step goes on.
// A write error on out is returned with the Exit once the step has ended
// (its remaining output is discarded). Errors the agent answers (a step
// already running, a bad shell) are returned as *Error.
//
// A connection that breaks is redialed and the output resumed where it
// stopped, in frames that shrink while connections break before one
// arrives and grow back as they arrive (the rule, with its bounds, is
// stepStream's doc in client_step.go).
func (c *Client) RunStep(ctx context.Context, st Start, out io.Writer, stop <-chan Stop) (Exit, error) {
	s := newStepStream(st, out)
	for {
		cn, err := c.conn(ctx)
		if err != nil {
			return Exit{}, err
		}
		s.resume()
		ex, final, err := c.follow(ctx, cn, s, stop)
		if final {
			return ex, err
		}
		if ctx.Err() != nil {
			return Exit{}, ctx.Err()
		}
		s.cut(err)
		c.drop(cn, err)
	}
}

// follow follows s on cn until the step's end or cn's: it asks for the
// output (stepStream.request), passes each Stop received on stop on, and
// hands each frame to s. final says RunStep returns (ex, err): the Exit,
// an *Error the agent answered, ctx's error. Otherwise err is why cn
// broke, and s resumes on a new connection.
func (c *Client) follow(ctx context.Context, cn *Conn, s *stepStream, stop <-chan Stop) (ex Exit, final bool, err error) {
	err = s.request(cn)
	for err == nil {
		var f Frame
		select {
		case st := <-stop:
			err = s.sendStop(cn, st)
			continue
		case <-ctx.Done():
			return Exit{}, true, ctx.Err()
		case fr, ok := <-cn.Frames():
			if !ok {
				return Exit{}, false, cn.Err()
			}
			f = fr
		}
		switch f.Type {
		case TypeStarted:
			s.started = true
			c.logStarted(f, s.st.ID, s.offset)
		case TypeOutput, TypeOutputZstd:
			err = s.writeOutput(f.Type, f.Payload)
			f.Release()
		case TypeExit:
			if ex, final, err = s.exit(f.Payload); final {
				return ex, true, err
			}
		case TypeError:
			var e Error
			if err = Decode(f.Type, f.Payload, &e); err == nil {
				return Exit{}, true, &e
			}
		}
	}
	return Exit{}, false, err
}

// stepStream is what RunStep knows of one step's output across the
// connections it follows it on; each of its methods does one part of
// following it.
//
// The reconnection rule: every request for the output (Start until the
// agent said Started, then Attach) asks for it from offset, a byte count
// of the step's output (Start.Offset, what the caller had, plus what
// arrived since), in Output frames of at most chunk output bytes. chunk is
// OutputChunk at first (Start.Chunk is not used). When a connection
// breaks, cut sets the next request's chunk: a quarter of it (down to
// minChunk, 512 bytes) when no output arrived on that connection (offset
// did not move: it broke before a whole frame came), twice it (up to
// OutputChunk) when some did. A link that breaks every so many bytes thus
// still makes progress (frames shrink until one fits between two breaks),
// and frames grow back to full size once the link holds (every frame
// costs both sides system calls and the runner a checkpoint). The latest
// Stop received is sent again after each new request: a Stop sent while a
// connection was breaking reaches the agent.
type stepStream struct {
	st  Start     // the step as asked; a Start request is st with offset and chunk
	out io.Writer // where the output goes (a Resumer is told of each new connection)

	offset  int64  // the output bytes the caller has: st.Offset, plus what arrived
	from    int64  // offset when the current connection began
	chunk   int    // the Output frame size the next request asks for, in bytes: [minChunk, OutputChunk]
	started bool   // the agent said Started: later requests Attach
	stop    *Stop  // the latest Stop received; sent again on each new connection
	werr    error  // out's first write error; the output after it is discarded
	dropped error  // why the last connection broke, until the output resumes
	unz     []byte // reused for decompressing OutputZstd frames
}

// minChunk is the smallest output frame a client asks for, in bytes.
const minChunk = 512

func newStepStream(st Start, out io.Writer) *stepStream {
	return &stepStream{st: st, out: out, offset: st.Offset, chunk: OutputChunk}
}

// resume begins a new connection: a Resumer out is told where the output
// goes on, and why, when an earlier connection of a started step broke.
func (s *stepStream) resume() {
	if r, ok := s.out.(Resumer); ok && s.dropped != nil && s.started {
		r.Resumed(s.offset, s.dropped)
	}
	s.dropped = nil
	s.from = s.offset
}

// request asks for the output on cn, from offset in frames of chunk bytes:
// Start until the agent said Started, Attach after; then it sends the
// pending Stop again.
func (s *stepStream) request(cn *Conn) error {
	var err error
	if s.started {
		err = cn.WriteJSON(TypeAttach, Attach{ID: s.st.ID, Offset: s.offset, Chunk: s.chunk, Compression: s.st.Compression})
	} else {
		req := s.st
		req.Offset, req.Chunk = s.offset, s.chunk
		err = cn.WriteJSON(TypeStart, req)
	}
	if err == nil && s.stop != nil {
		err = cn.WriteJSON(TypeStop, *s.stop)
	}
	return err
}

// sendStop remembers st as the pending Stop and sends it on cn.
func (s *stepStream) sendStop(cn *Conn, st Stop) error {
	s.stop = &st
	return cn.WriteJSON(TypeStop, st)
}

// writeOutput writes the output in an Output or OutputZstd (type t)
// payload to out, past what arrived already, and advances offset.
// OutputZstd data is decompressed first. Another step's output is
// ignored. A write error is kept in werr (later output is discarded); an
// error return is the stream's: a frame that does not decode, or starts
// past offset (output would be lost).
func (s *stepStream) writeOutput(t Type, payload []byte) error {
	fid, off, data, err := DecodeOutput(payload)
	if err != nil {
		return err
	}
	if fid != s.st.ID {
		return nil
	}
	if off > s.offset {
		return fmt.Errorf("agent protocol: output of step %s jumps from byte %d to %d", s.st.ID, s.offset, off)
	}
	if t == TypeOutputZstd {
		if data, err = DecompressOutput(s.unz, data); err != nil {
			return err
		}
		s.unz = data[:0]
	}
	if skip := s.offset - off; skip > 0 {
		if skip >= int64(len(data)) {
			return nil
		}
		data = data[skip:]
	}
	if s.werr == nil {
		if _, e := s.out.Write(data); e != nil {
			s.werr = e
		}
	}
	s.offset += int64(len(data))
	return nil
}

// exit reads an Exit payload. final says the step ended: ex is its Exit,
// err out's write error if there was one. Otherwise the Exit is another
// step's (nil error: ignored) or err is the stream's: a payload that does
// not decode, or an Exit whose output size is not what arrived.
func (s *stepStream) exit(payload []byte) (ex Exit, final bool, err error) {
	if err = Decode(TypeExit, payload, &ex); err != nil {
		return Exit{}, false, err
	}
	if ex.ID != s.st.ID {
		return Exit{}, false, nil
	}
	if ex.Error == "" && ex.Size != s.offset {
		return Exit{}, false, fmt.Errorf("agent protocol: step %s ended with %d output bytes, %d arrived", s.st.ID, ex.Size, s.offset)
	}
	if s.werr != nil {
		return ex, true, fmt.Errorf("write output of step %s: %w", s.st.ID, s.werr)
	}
	return ex, true, nil
}

// cut ends the current connection, broken by err: the next request's
// chunk shrinks or grows (the rule in stepStream's doc).
func (s *stepStream) cut(err error) {
	if s.offset == s.from {
		s.chunk = max(s.chunk/4, minChunk)
	} else {
		s.chunk = min(s.chunk*2, OutputChunk)
	}
	s.dropped = err
}

// logStarted says what the agent's Started (frame f, for step id, asked
// from byte offset) tells of the step: attached to a step that was running
// already (a takeover or a re-dial: Info), or started anew although output
// from offset > 0 on was expected (the step runs a second time: Warn). A
// person reading the runner's log, and the takeover tests, see which.
func (c *Client) logStarted(f Frame, id string, offset int64) {
	var s Started
	if Decode(f.Type, f.Payload, &s) != nil || s.ID != id {
		return
	}
	switch {
	case s.Attached:
		c.log.Info("step agent: attached to a step that was running already", "step", id, "offset", offset)
	case offset > 0:
		c.log.Warn("step agent: started a step anew although its output from this offset on was expected: it runs a second time",
			"step", id, "offset", offset)
	}
}
