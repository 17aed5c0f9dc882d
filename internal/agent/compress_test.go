package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func writeTree(t *testing.T, dir string) {
	t.Helper()
	rnd := rand.New(rand.NewSource(1))
	for i, size := range []int{0, 10, 100_000, 1 << 20} {
		b := make([]byte, size)
		rnd.Read(b[:size/2]) // half noise, half zeros: some of it compresses
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
}

func TestCompress_ZstdCopyStreamRoundTripsAndShrinks(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	writeTree(t, src)
	var plain, packed bytes.Buffer
	if err := WriteTar(context.Background(), &plain, HostTree{}, src); err != nil {
		t.Fatal(err)
	}
	cw, err := Compress(&packed, CompressionZstd)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteTar(context.Background(), cw, HostTree{}, src); err != nil {
		t.Fatal(err)
	}
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	if packed.Len() >= plain.Len()*3/4 {
		t.Fatalf("zstd stream %d bytes, plain %d: no gain", packed.Len(), plain.Len())
	}
	r, done, err := Decompress(&packed, CompressionZstd)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if _, err := ExtractTar(context.Background(), r, HostTree{}, dst); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		want, _ := os.ReadFile(filepath.Join(src, n))
		got, err := os.ReadFile(filepath.Join(dst, n))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s differs after the round trip (%v)", n, err)
		}
	}
	if l, _ := os.Readlink(filepath.Join(dst, "link")); l != "a" {
		t.Fatalf("link %q", l)
	}
}

// A byte flipped on the way is caught by the zstd frame itself (besides the
// stream's SHA-256, which both ends of the agent protocol compare).
func TestCompress_CorruptedZstdStreamIsAnError(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src)
	var packed bytes.Buffer
	cw, _ := Compress(&packed, CompressionZstd)
	if err := WriteTar(context.Background(), cw, HostTree{}, src); err != nil {
		t.Fatal(err)
	}
	_ = cw.Close()
	b := packed.Bytes()
	b[len(b)/2] ^= 0x40
	r, done, err := Decompress(bytes.NewReader(b), CompressionZstd)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	_, err = ExtractTar(context.Background(), r, HostTree{}, filepath.Join(t.TempDir(), "out"))
	if err == nil {
		_, err = io.Copy(io.Discard, r)
	}
	if err == nil {
		t.Fatal("a corrupted stream unpacked without an error")
	}
	if _, err := Compress(io.Discard, "lz5"); err == nil {
		t.Fatal("unknown compression accepted")
	}
}

// TestOutputCompression_RoundTripsAndRefusesWhatIsNotAFrame: a frame's
// output compresses and decompresses byte for byte; random output and
// pieces under 512 bytes are not worth compressing; data that is not a
// zstd frame, or one decoding to more than OutputChunk bytes, gives
// ErrCorrupt.
func TestOutputCompression_RoundTripsAndRefusesWhatIsNotAFrame(t *testing.T) {
	text := bytes.Repeat([]byte("ok   knotless.dev/knotless/internal/agent 0.42s\n"), 22_000)[:OutputChunk]
	z, ok := CompressOutput(nil, text)
	if !ok || len(z) > len(text)/10 {
		t.Fatalf("text: %d bytes compressed to %d (worth it: %v)", len(text), len(z), ok)
	}
	got, err := DecompressOutput(nil, z)
	if err != nil || !bytes.Equal(got, text) {
		t.Fatalf("text decompressed to %d bytes (err %v), want the %d compressed", len(got), err, len(text))
	}
	random := make([]byte, 64<<10)
	rand.New(rand.NewSource(2)).Read(random)
	if _, ok := CompressOutput(nil, random); ok {
		t.Error("random bytes: compressing them said worth it")
	}
	if _, ok := CompressOutput(nil, bytes.Repeat([]byte("x"), 511)); ok {
		t.Error("511 bytes: compressing them said worth it")
	}
	if _, err := DecompressOutput(nil, []byte("not a zstd frame")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("garbage: %v, want ErrCorrupt", err)
	}
	big, _ := zstd.NewWriter(nil)
	if _, err := DecompressOutput(nil, big.EncodeAll(make([]byte, OutputChunk+1), nil)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a frame of %d bytes: %v, want ErrCorrupt", OutputChunk+1, err)
	}
}
