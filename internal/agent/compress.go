package agent

import (
	"fmt"
	"io"
	"slices"

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
