package server

import (
	"bytes"
	"encoding/binary"
	"os"
	"slices"
	"testing"

	"knotless.dev/knotless/internal/api"
)

// TestLogFiles_LongLogHandedToTheDiskReadsBackWhole pins that dropping a
// long log's written-back units from the page cache (dropBehind) changes
// nothing of what it holds.
func TestLogFiles_LongLogHandedToTheDiskReadsBackWhole(t *testing.T) {
	l := &logFiles{dir: t.TempDir()}
	var want bytes.Buffer
	for i := 0; want.Len() < 5*dropUnit; i++ {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 3<<20+i*4097)
		before, after, err := l.append(7, 1, int64(want.Len()), chunk)
		if err != nil || before != int64(want.Len()) || after != before+int64(len(chunk)) {
			t.Fatalf("append %d: %d → %d, %v", i, before, after, err)
		}
		want.Write(chunk)
	}
	got, err := os.ReadFile(l.path(7, 1))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("the log reads back %d bytes, not the %d written", len(got), want.Len())
	}
}

// TestLogFiles_InterleavedAppendsToOneLogWriteEachByteOnce pins the size
// an append that writes in pieces keeps between them (so that it need not
// stat the file each time): when another append wrote to the log in
// between (a runner's retry while its first request still arrives), the
// next piece reads the log's size again and skips what the other wrote.
// The line times go with their bytes: each once, in order (they were
// written at each request's end, and two requests' overlapping times
// then came out twice and out of order, which the times file's binary
// search cannot read).
func TestLogFiles_InterleavedAppendsToOneLogWriteEachByteOnce(t *testing.T) {
	l := &logFiles{dir: t.TempDir()}
	var times []api.LineTime // a line every 2 bytes; a retry sends the same
	for off := int64(0); off < 12; off += 2 {
		times = append(times, api.LineTime{Offset: off, UnixMS: 1000 + off})
	}
	first, err := l.openAppend(7, 1, times)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := l.openAppend(7, 1, times)
	if err != nil {
		t.Fatal(err)
	}
	write := func(a *logAppend, offset int64, data string, want int64) {
		t.Helper()
		if _, after, err := a.write(offset, []byte(data)); err != nil || after != want {
			t.Fatalf("write %q at %d: size %d, %v; want %d", data, offset, after, err, want)
		}
	}
	write(first, 0, "abcd", 4)
	write(first, 4, "ef", 6) // nothing in between: no stat needed
	write(retry, 2, "cdefgh", 8)
	write(first, 6, "ghij", 10) // the retry wrote "gh": only "ij" is new
	write(retry, 8, "ijkl", 12)
	for _, a := range []*logAppend{first, retry} {
		if err := a.close(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := os.ReadFile(l.path(7, 1)); err != nil || string(got) != "abcdefghijkl" {
		t.Fatalf("the log holds %q (%v), want each byte once: %q", got, err, "abcdefghijkl")
	}
	raw, err := os.ReadFile(l.timesPath(7, 1))
	if err != nil {
		t.Fatal(err)
	}
	var got []api.LineTime
	for ; len(raw) >= api.LineTimeSize; raw = raw[api.LineTimeSize:] {
		var lt api.LineTime
		lt.Offset = int64(binary.LittleEndian.Uint64(raw))
		lt.UnixMS = int64(binary.LittleEndian.Uint64(raw[8:]))
		got = append(got, lt)
	}
	if !slices.Equal(got, times) {
		t.Fatalf("the times file holds %v, want each line's time once, in order: %v", got, times)
	}
}
