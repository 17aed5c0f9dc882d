package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
)

// CopyIn sends the copy-format tar stream that produce writes (called once
// per attempt: it must write the same bytes each time) to be unpacked at
// dst in the environment, and checks that what arrived is what was sent.
func (c *Client) CopyIn(ctx context.Context, dst string, produce func(w io.Writer) error) (CopyDone, error) {
	return c.CopyInWith(ctx, CopyIn{Dst: dst}, produce)
}

// CopyInWith is CopyIn with the request's options: with req.Compression,
// produce's tar stream is compressed on the way (the agent's hello must
// list it: AgentHello.Speaks).
func (c *Client) CopyInWith(ctx context.Context, req CopyIn, produce func(w io.Writer) error) (CopyDone, error) {
	dst := req.Dst
	if req.Compression != "" {
		plain := produce
		produce = func(w io.Writer) error {
			cw, err := Compress(w, req.Compression)
			if err != nil {
				return err
			}
			err = plain(cw)
			if cerr := cw.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		cn, err := c.conn(ctx)
		if err != nil {
			return CopyDone{}, err
		}
		done, err, broken := c.copyInOnce(ctx, cn, req, produce)
		if !broken {
			return done, err
		}
		if ctx.Err() != nil {
			return CopyDone{}, ctx.Err()
		}
		last = err
		c.drop(cn, err)
	}
	return CopyDone{}, fmt.Errorf("copy to %s: the connection broke 5 times: %w", dst, last)
}

// copyInOnce makes one attempt; broken reports a connection failure (retry).
func (c *Client) copyInOnce(ctx context.Context, cn *Conn, req CopyIn, produce func(w io.Writer) error) (CopyDone, error, bool) {
	dst := req.Dst
	if err := cn.WriteJSON(TypeCopyIn, req); err != nil {
		return CopyDone{}, err, true
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(produce(pw)) }()
	defer pr.Close()
	h := sha256.New()
	var n int64
	buf := make([]byte, DataChunk)
	var perr error
	for {
		k, err := io.ReadFull(pr, buf)
		if k > 0 {
			h.Write(buf[:k])
			n += int64(k)
			if werr := cn.Write(TypeData, buf[:k]); werr != nil {
				return CopyDone{}, werr, true
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			perr = err
			break
		}
		// Let heartbeats through while sending a long stream.
		select {
		case <-cn.Done():
			return CopyDone{}, cn.Err(), true
		default:
		}
	}
	end := DataEnd{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	if perr != nil {
		end.Error = perr.Error()
	}
	if err := cn.WriteJSON(TypeDataEnd, end); err != nil {
		return CopyDone{}, err, true
	}
	for {
		f, err := cn.next(ctx)
		if err != nil {
			return CopyDone{}, err, ctx.Err() == nil
		}
		switch f.Type {
		case TypeCopyDone:
			var d CopyDone
			if err := Decode(f.Type, f.Payload, &d); err != nil {
				return d, err, true
			}
			switch {
			case perr != nil:
				return d, fmt.Errorf("copy to %s: %w", dst, perr), false
			case d.Error != "":
				return d, fmt.Errorf("copy to %s: %s", dst, d.Error), false
			case d.Bytes != end.Bytes || d.SHA256 != end.SHA256:
				return d, fmt.Errorf("copy to %s: sent %d bytes (sha256 %s), the agent got %d (sha256 %s)", dst, end.Bytes, end.SHA256, d.Bytes, d.SHA256), false
			}
			return d, nil, false
		case TypeError:
			var e Error
			if err := Decode(f.Type, f.Payload, &e); err != nil {
				return CopyDone{}, err, true
			}
			return CopyDone{}, &e, false
		}
	}
}

// CopyOut asks for src in the environment and hands the copy-format tar
// stream to consume (called once per attempt; it must tolerate being
// called again after a failed attempt). It checks the stream's length and
// SHA-256 against what the agent sent.
func (c *Client) CopyOut(ctx context.Context, src string, consume func(r io.Reader) error) error {
	return c.CopyOutWith(ctx, CopyOut{Src: src}, consume)
}

// CopyOutWith is CopyOut with the request's options: with
// req.Compression, the agent compresses the stream and consume reads it
// decompressed (the zstd frame's checksum is checked to its end).
func (c *Client) CopyOutWith(ctx context.Context, req CopyOut, consume func(r io.Reader) error) error {
	src := req.Src
	if req.Compression != "" {
		plain := consume
		consume = func(r io.Reader) error {
			dr, done, err := Decompress(r, req.Compression)
			if err != nil {
				return err
			}
			defer done()
			if err := plain(dr); err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, dr)
			return err
		}
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		cn, err := c.conn(ctx)
		if err != nil {
			return err
		}
		err, broken := c.copyOutOnce(ctx, cn, req, consume)
		if !broken {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		last = err
		c.drop(cn, err)
	}
	return fmt.Errorf("copy %s out: the connection broke 5 times: %w", src, last)
}

type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	hw.h.Write(p)
	hw.n += int64(len(p))
	return hw.w.Write(p)
}

func (c *Client) copyOutOnce(ctx context.Context, cn *Conn, req CopyOut, consume func(r io.Reader) error) (error, bool) {
	src := req.Src
	if err := cn.WriteJSON(TypeCopyOut, req); err != nil {
		return err, true
	}
	pr, pw := io.Pipe()
	consumed := make(chan error, 1)
	go func() {
		err := consume(pr)
		if err == nil {
			// Drain what the consumer left, so hashes compare whole streams.
			_, err = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(err)
		consumed <- err
	}()
	hw := &hashWriter{w: pw, h: sha256.New()}
	fail := func(err error, broken bool) (error, bool) {
		pw.CloseWithError(err)
		<-consumed
		return err, broken
	}
	for {
		f, err := cn.next(ctx)
		if err != nil {
			return fail(err, ctx.Err() == nil)
		}
		switch f.Type {
		case TypeData:
			if _, err := hw.Write(f.Payload); err != nil {
				// The consumer failed: read the rest off the connection
				// without it, then report.
				hw.w = io.Discard
			}
			f.Release()
		case TypeDataEnd:
			var end DataEnd
			if err := Decode(f.Type, f.Payload, &end); err != nil {
				return fail(err, true)
			}
			sum := hex.EncodeToString(hw.h.Sum(nil))
			switch {
			case end.Error != "" && end.NotExist:
				return fail(fmt.Errorf("copy %s out: %s: %w", src, end.Error, fs.ErrNotExist), false)
			case end.Error != "":
				return fail(fmt.Errorf("copy %s out: %s", src, end.Error), false)
			case end.Bytes != hw.n || end.SHA256 != sum:
				return fail(fmt.Errorf("copy %s out: the agent sent %d bytes (sha256 %s), %d arrived (sha256 %s)", src, end.Bytes, end.SHA256, hw.n, sum), true)
			}
			pw.Close()
			if err := <-consumed; err != nil {
				return fmt.Errorf("copy %s out: %w", src, err), false
			}
			return nil, false
		case TypeError:
			var e Error
			if err := Decode(f.Type, f.Payload, &e); err != nil {
				return fail(err, true)
			}
			return fail(&e, false)
		}
	}
}
