package stepagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"knotless.dev/knotless/internal/agent"
)

// follow streams s's output from off, then its exit, on this connection;
// a follow already running on it is ended first.
func (h *connHandler) follow(s *step, off int64, chunk int, compression string) {
	h.endFollow()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.stopFollow, h.followDone = cancel, done
	go func() {
		defer close(done)
		if err := streamOutput(ctx, h.cn, s, off, chunk, compression); err != nil && ctx.Err() == nil {
			h.a.log.Debug("following a step's output ended", "step", s.id, "err", err)
		}
	}()
}

func (h *connHandler) endFollow() {
	if h.stopFollow != nil {
		h.stopFollow()
		<-h.followDone
		h.stopFollow, h.followDone = nil, nil
	}
}

// streamOutput sends s's output from byte off in frames of at most chunk
// bytes, then its Exit, as the output grows, until ctx ends or a write
// fails. With compression CompressionZstd, a frame whose output shrinks
// by compressing goes as OutputZstd; after a frame that did not, the next
// incompressibleSkip frames go as they are without trying.
//
// A step that writes in small pieces (a shell loop, `head -c`'s 4 KiB
// writes) would make a frame of each: while it runs, a frame of less
// than coalesceBytes waits until coalesceDelay has passed since the
// previous frame, so that one frame carries what arrived meanwhile. Output
// after a quiet spell goes at once.
func streamOutput(ctx context.Context, cn *agent.Conn, s *step, off int64, chunk int, compression string) error {
	if chunk <= 0 || chunk > agent.OutputChunk {
		chunk = agent.OutputChunk
	}
	buf := make([]byte, chunk)
	var (
		z    []byte
		sent time.Time // when the last frame went
		wait *time.Timer
	)
	skip := 0
	if compression == agent.CompressionZstd {
		z = make([]byte, 0, chunk)
	} else {
		skip = -1 // never
	}
	for {
		grown := s.growth()
		done := s.isDone() // before size: once done, size is final
		size := s.size.Load()
		switch {
		case off < size:
			if pause := coalesceDelay - time.Since(sent); !done && size-off < coalesceBytes && pause > 0 {
				if wait == nil {
					wait = time.NewTimer(pause)
					defer wait.Stop()
				} else {
					wait.Reset(pause)
				}
				select {
				case <-wait.C:
				case <-ctx.Done():
					return ctx.Err()
				}
				continue
			}
			n := min(int64(len(buf)), size-off)
			k, err := s.out.ReadAt(buf[:n], off)
			if k > 0 {
				t, data := agent.TypeOutput, buf[:k]
				switch {
				case skip > 0:
					skip--
				case skip == 0:
					if zk, ok := agent.CompressOutput(z, data); ok {
						t, data, z = agent.TypeOutputZstd, zk, zk[:0]
					} else if k >= 512 {
						skip = incompressibleSkip
					}
				}
				if err := cn.Write(t, agent.EncodeOutput(s.id, off), data); err != nil {
					return err
				}
				sent = time.Now()
				off += int64(k)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			continue
		case done && off > size:
			return cn.WriteJSON(agent.TypeError, agent.Error{For: "attach", Step: s.id,
				Message: fmt.Sprintf("offset %d is past the step's output of %d bytes", off, size)})
		case done:
			return cn.WriteJSON(agent.TypeExit, s.exit)
		}
		select {
		case <-grown:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// coalesceDelay and coalesceBytes bound how long (since the previous
// frame) and for how few bytes a running step's output waits for more
// before it is sent: at most 10 frames a second of less than 256 KiB,
// at most 100 ms later than without waiting (output after a quiet spell
// goes at once). A frame costs the agent, each hop of the exec path, the
// runner and its shipping about the same whatever it holds: at 2 ms, 25
// steps writing 1 MB/s in 20 ms pieces made ~41 frames a second each and
// the agents took 0.73 of the node's 2 cores (docs/scaling.md "Log
// streams through the API server").
const (
	coalesceDelay = 100 * time.Millisecond
	coalesceBytes = 256 << 10
)

// incompressibleSkip is how many Output frames follow one that did not
// shrink before the agent tries compressing again: output that is random
// or compressed already costs a try in one frame of this many.
const incompressibleSkip = 15

func (h *connHandler) startCopyIn(req agent.CopyIn) {
	if h.copyIn != nil {
		h.copyIn.pw.CloseWithError(errors.New("a new copy began"))
		<-h.copyIn.done
	}
	pr, pw := io.Pipe()
	ci := &copyIn{pw: pw, done: make(chan agent.CopyDone, 1), h: sha256.New()}
	h.copyIn = ci
	go func() {
		var d agent.CopyDone
		t, name, closeTree, err := agent.ResolveIn(h.a.cfg.Workdir, req.Dst)
		if err == nil {
			var r io.Reader
			var closeR func()
			if r, closeR, err = agent.Decompress(pr, req.Compression); err == nil {
				d.Files, err = agent.ExtractTar(context.Background(), r, t, name)
				if err == nil && req.Compression != "" {
					// To the compressed stream's end: its checksum.
					_, err = io.Copy(io.Discard, r)
				}
				closeR()
			}
			closeTree()
		}
		if err != nil {
			d.Error = err.Error()
		}
		pr.CloseWithError(errors.New("unpacking stopped")) // unblock the writer
		ci.done <- d
	}()
}

func (h *connHandler) endCopyIn(end agent.DataEnd) {
	ci := h.copyIn
	if ci == nil {
		h.fail(agent.TypeDataEnd, "", errors.New("no copy in progress"))
		return
	}
	h.copyIn = nil
	if end.Error != "" {
		ci.pw.CloseWithError(errors.New(end.Error))
	} else {
		ci.pw.Close()
	}
	d := <-ci.done
	d.Bytes, d.SHA256 = ci.n, hex.EncodeToString(ci.h.Sum(nil))
	if d.Error == "" && end.Error != "" {
		d.Error = "the sender failed: " + end.Error
	}
	_ = h.cn.WriteJSON(agent.TypeCopyDone, d)
}

// copyOut streams req.Src as a copy-format tar stream.
func (h *connHandler) copyOut(req agent.CopyOut) {
	w := &dataWriter{cn: h.cn, h: sha256.New()}
	t, name, closeTree, err := agent.ResolveIn(h.a.cfg.Workdir, req.Src)
	if err == nil {
		var cw io.WriteCloser
		if cw, err = agent.Compress(w, req.Compression); err == nil {
			err = agent.WriteTar(context.Background(), cw, t, name)
			if cerr := cw.Close(); err == nil {
				err = cerr
			}
		}
		closeTree()
	}
	if err == nil {
		err = w.flush()
	}
	end := agent.DataEnd{Bytes: w.n, SHA256: hex.EncodeToString(w.h.Sum(nil))}
	if err != nil {
		end.Error = err.Error()
		end.NotExist = w.n == 0 && errors.Is(err, fs.ErrNotExist)
	}
	_ = h.cn.WriteJSON(agent.TypeDataEnd, end)
}

// dataWriter cuts a stream into Data frames of agent.DataChunk bytes.
type dataWriter struct {
	cn *agent.Conn
	h  interface {
		io.Writer
		Sum([]byte) []byte
	}
	buf []byte
	n   int64
}

func (w *dataWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, agent.DataChunk)
		}
		k := min(len(p), agent.DataChunk-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == agent.DataChunk {
			if err := w.flush(); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

func (w *dataWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.h.Write(w.buf)
	w.n += int64(len(w.buf))
	err := w.cn.Write(agent.TypeData, w.buf)
	w.buf = w.buf[:0]
	return err
}
