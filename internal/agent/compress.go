package agent

import (
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Compress wraps w for a copy stream compressed with compression ("" or
// CompressionZstd). Close flushes the compressed stream's end (it does
// not close w). zstd frames carry a content checksum, which Decompress
// checks on top of the stream's SHA-256.
func Compress(w io.Writer, compression string) (io.WriteCloser, error) {
	switch compression {
	case "":
		return nopCloser{w}, nil
	case CompressionZstd:
		// SpeedFastest: the copy must keep up with a fast link; most of a
		// cache (source, modules, objects) still shrinks 2-4x.
		return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
	}
	return nil, fmt.Errorf("unknown copy compression %q", compression)
}

// Decompress wraps r for a copy stream compressed with compression. done
// releases the decoder.
func Decompress(r io.Reader, compression string) (io.Reader, func(), error) {
	switch compression {
	case "":
		return r, func() {}, nil
	case CompressionZstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown copy compression %q", compression)
}

// Speaks reports whether an agent that sent hello unpacks and produces
// streams compressed with compression.
func (h AgentHello) Speaks(compression string) bool {
	return compression == "" || slices.Contains(h.Compression, compression)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// Output compression: each OutputZstd frame's data is one zstd frame,
// compressed and decompressed on its own, so that a client can attach from
// any frame's offset. The frame's CRC-32C covers the compressed bytes; the
// zstd frame carries no checksum of its own.
var (
	outputEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(2), zstd.WithEncoderCRC(false),
			zstd.WithWindowSize(outputWindow), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(err) // only for invalid options
		}
		return e
	})
	outputDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderMaxMemory(OutputChunk))
		if err != nil {
			panic(err) // only for invalid options
		}
		return d
	})
)

// outputWindow is the zstd window of an OutputZstd frame, in bytes: a
// power of two at least OutputChunk.
const outputWindow = MaxPayload

// CompressOutput compresses one frame's output (at most OutputChunk bytes)
// into dst's spare capacity and reports whether that is worth sending:
// false when the result is not at least one eighth smaller than src (the
// output is already compressed, or random), and for src under 512 bytes,
// where a frame's header would eat the gain.
func CompressOutput(dst, src []byte) ([]byte, bool) {
	if len(src) < 512 {
		return dst, false
	}
	z := outputEncoder().EncodeAll(src, dst[:0])
	return z, len(z) < len(src)-len(src)/8
}

// DecompressOutput decompresses an OutputZstd frame's data into dst's
// spare capacity (grown to OutputChunk when smaller). It returns an error
// wrapping ErrCorrupt for data that is not one zstd frame or decodes to
// more than OutputChunk bytes.
func DecompressOutput(dst, z []byte) ([]byte, error) {
	if cap(dst) < OutputChunk {
		dst = make([]byte, 0, OutputChunk)
	}
	out, err := outputDecoder().DecodeAll(z, dst[:0])
	if err != nil {
		return nil, fmt.Errorf("%w: output-zstd frame: %v", ErrCorrupt, err)
	}
	return out, nil
}
