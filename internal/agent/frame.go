package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Preamble opens the stream in both directions, before the Hello frames.
const Preamble = "KNOTLESS-AGENT\n"

// Version is the newest protocol version this package speaks.
const Version = 1

// MaxPayload is the largest frame payload either side sends or accepts, in
// bytes.
const MaxPayload = 1 << 20

// OutputChunk is the most output bytes the agent puts in one Output frame
// (MaxPayload less room for the frame's step ID and offset), and DataChunk
// the most tar bytes in one Data frame. A chatty step's output travels in
// frames as large as the agent's pipe buffer: every frame costs both sides
// system calls and the runner a checkpoint.
const (
	OutputChunk = MaxPayload - 128
	DataChunk   = 256 << 10
)

// Type is a frame's type.
type Type uint8

// Frame types. Client → agent: Hello, Start, Attach, Stop, CopyIn, Data,
// DataEnd, CopyOut, Shutdown, Heartbeat. Agent → client: Hello, Started,
// Output, OutputZstd, Exit, Data, DataEnd, CopyDone, Error, Heartbeat.
const (
	TypeHello        Type = 0x01 // ClientHello / AgentHello (JSON)
	TypeHeartbeat    Type = 0x02 // empty; sent by either side while idle
	TypeStart        Type = 0x10 // Start (JSON)
	TypeStarted      Type = 0x11 // Started (JSON)
	TypeAttach       Type = 0x12 // Attach (JSON)
	TypeOutput       Type = 0x13 // binary: see EncodeOutput
	TypeExit         Type = 0x14 // Exit (JSON)
	TypeStop         Type = 0x15 // Stop (JSON)
	TypeSteps        Type = 0x16 // empty; answered by StepList
	TypeStepList     Type = 0x17 // StepList (JSON)
	TypeOutputZstd   Type = 0x18 // binary: see EncodeOutput; data is one zstd frame
	TypeCopyIn       Type = 0x20 // CopyIn (JSON), then Data..., DataEnd
	TypeCopyOut      Type = 0x21 // CopyOut (JSON); answered by Data..., DataEnd
	TypeData         Type = 0x22 // raw tar bytes
	TypeDataEnd      Type = 0x23 // DataEnd (JSON)
	TypeCopyDone     Type = 0x24 // CopyDone (JSON)
	TypeShutdown     Type = 0x30 // Shutdown (JSON); answered by ShutdownDone
	TypeShutdownDone Type = 0x31 // empty
	TypeAdopt        Type = 0x32 // Adopt (JSON); answered by Adopted
	TypeAdopted      Type = 0x33 // empty
	TypeError        Type = 0x7f // Error (JSON)
)

func (t Type) String() string {
	switch t {
	case TypeHello:
		return "hello"
	case TypeHeartbeat:
		return "heartbeat"
	case TypeStart:
		return "start"
	case TypeStarted:
		return "started"
	case TypeAttach:
		return "attach"
	case TypeOutput:
		return "output"
	case TypeOutputZstd:
		return "output-zstd"
	case TypeExit:
		return "exit"
	case TypeStop:
		return "stop"
	case TypeSteps:
		return "steps"
	case TypeStepList:
		return "step-list"
	case TypeCopyIn:
		return "copy-in"
	case TypeCopyOut:
		return "copy-out"
	case TypeData:
		return "data"
	case TypeDataEnd:
		return "data-end"
	case TypeCopyDone:
		return "copy-done"
	case TypeShutdown:
		return "shutdown"
	case TypeShutdownDone:
		return "shutdown-done"
	case TypeError:
		return "error"
	}
	return fmt.Sprintf("type-%#02x", uint8(t))
}

// Frame layout: type (1 byte), payload length (4 bytes, big-endian),
// payload, CRC-32C (Castagnoli, 4 bytes, big-endian) of everything before it.
const (
	headerLen  = 5
	trailerLen = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is returned (wrapped) by ReadFrame for bytes that are not a
// well-formed frame: a bad checksum or an impossible length.
var ErrCorrupt = errors.New("agent protocol: corrupt frame")

// ErrNotAgent is returned (wrapped) by the handshake when the other side
// does not open with Preamble; the error quotes what it sent instead.
var ErrNotAgent = errors.New("agent protocol: the other side is not a knotless agent")

// FrameWriter writes frames to a stream. It is safe for concurrent use:
// each frame is written whole.
type FrameWriter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	hdr [headerLen]byte
	crc [trailerLen]byte
}

// NewFrameWriter returns a FrameWriter on w.
func NewFrameWriter(w io.Writer) *FrameWriter {
	return &FrameWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

// WriteRaw writes s unframed (the preamble) and flushes.
func (fw *FrameWriter) WriteRaw(s string) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if _, err := fw.w.WriteString(s); err != nil {
		return err
	}
	return fw.w.Flush()
}

// WriteFrame writes one frame made of the concatenation of parts (at most
// MaxPayload bytes in all) and flushes it.
func (fw *FrameWriter) WriteFrame(t Type, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxPayload {
		return fmt.Errorf("agent protocol: %s frame of %d bytes exceeds %d", t, n, MaxPayload)
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.hdr[0] = byte(t)
	binary.BigEndian.PutUint32(fw.hdr[1:], uint32(n))
	sum := crc32.Update(0, castagnoli, fw.hdr[:])
	if _, err := fw.w.Write(fw.hdr[:]); err != nil {
		return err
	}
	for _, p := range parts {
		sum = crc32.Update(sum, castagnoli, p)
		if _, err := fw.w.Write(p); err != nil {
			return err
		}
	}
	binary.BigEndian.PutUint32(fw.crc[:], sum)
	if _, err := fw.w.Write(fw.crc[:]); err != nil {
		return err
	}
	return fw.w.Flush()
}

// FrameReader reads frames from a stream. Not safe for concurrent use.
type FrameReader struct {
	r   *bufio.Reader
	hdr [headerLen]byte
	buf []byte
}

// NewFrameReader returns a FrameReader on r.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// ReadPreamble reads and checks the Preamble. A stream that starts with
// anything else gives an error wrapping ErrNotAgent that quotes the first
// line it sent; an empty stream gives io.EOF, one that ends inside the
// preamble io.ErrUnexpectedEOF.
func (fr *FrameReader) ReadPreamble() error {
	got := make([]byte, 0, len(Preamble))
	for len(got) < len(Preamble) {
		b, err := fr.r.ReadByte()
		if err != nil {
			if len(got) == 0 {
				return err
			}
			// Cut inside the preamble: a broken stream, not a stranger.
			return unexpected(err)
		}
		got = append(got, b)
		if b != Preamble[len(got)-1] {
			// Read the rest of the line for the message.
			rest, _ := fr.r.Peek(fr.r.Buffered())
			if i := bytes.IndexByte(rest, '\n'); i >= 0 {
				rest = rest[:i]
			}
			return fmt.Errorf("%w: it sent %s", ErrNotAgent, quoteLine(append(got, rest...)))
		}
	}
	return nil
}

// quoteLine makes the start of a stream printable for an error message.
func quoteLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 200 {
		b = b[:200]
	}
	s := string(b)
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' }) {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q (not text)", s)
}

// ReadFrame reads the next frame. The payload is valid until the next call.
// A stream that ends between frames gives io.EOF; one that ends inside a
// frame gives io.ErrUnexpectedEOF; a frame that fails its checksum or
// announces more than MaxPayload bytes gives an error wrapping ErrCorrupt.
func (fr *FrameReader) ReadFrame() (Type, []byte, error) {
	return fr.readFrame(func(need int) []byte {
		if cap(fr.buf) < need {
			fr.buf = make([]byte, need, max(need, 64<<10))
		}
		return fr.buf[:need]
	})
}

// readFrame is ReadFrame reading the payload and its checksum into the
// buffer of need bytes that buf returns.
func (fr *FrameReader) readFrame(buf func(need int) []byte) (Type, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:1]); err != nil {
		return 0, nil, err // io.EOF between frames
	}
	if _, err := io.ReadFull(fr.r, fr.hdr[1:]); err != nil {
		return 0, nil, unexpected(err)
	}
	n := binary.BigEndian.Uint32(fr.hdr[1:])
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("%w: %s frame announces %d bytes (at most %d)", ErrCorrupt, Type(fr.hdr[0]), n, MaxPayload)
	}
	b := buf(int(n) + trailerLen)
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return 0, nil, unexpected(err)
	}
	sum := crc32.Update(crc32.Update(0, castagnoli, fr.hdr[:]), castagnoli, b[:n])
	if got := binary.BigEndian.Uint32(b[n:]); got != sum {
		return 0, nil, fmt.Errorf("%w: %s frame of %d bytes fails its checksum", ErrCorrupt, Type(fr.hdr[0]), n)
	}
	return Type(fr.hdr[0]), b[:n], nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
