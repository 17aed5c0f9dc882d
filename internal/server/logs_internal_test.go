package server

import (
	"bytes"
	"os"
	"testing"
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
