package server

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCappedBody_GzipBombIsCutWhereItsBytesPassTheCap pins that the cap
// of a git body counts the bytes gzip makes, not only those sent: 64 MiB
// of zeros sent as 64 KiB of gzip stop at the cap.
func TestCappedBody_GzipBombIsCutWhereItsBytesPassTheCap(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zeros := make([]byte, 1<<20)
	for range 64 {
		zw.Write(zeros)
	}
	zw.Close()
	r, _ := http.NewRequest("POST", "/x", bytes.NewReader(gz.Bytes()))
	r.Header.Set("Content-Encoding", "gzip")
	b, err := newCappedBody(r, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, b)
	if !errors.Is(err, errBodyTooLarge) || n != 1<<20 || !b.over() {
		t.Fatalf("read %d bytes of a %d-byte gzip bomb, err %v; want 1 MiB and errBodyTooLarge", n, gz.Len(), err)
	}
}

func TestCappedBody_EndingAtTheCapIsWholeAndOtherEncodingsAreRefused(t *testing.T) {
	r, _ := http.NewRequest("POST", "/x", strings.NewReader("12345678"))
	b, err := newCappedBody(r, 8)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(b); err != nil || string(got) != "12345678" || b.over() {
		t.Fatalf("a body of exactly its cap: %q, %v, over %v", got, err, b.over())
	}
	r, _ = http.NewRequest("POST", "/x", strings.NewReader("x"))
	r.Header.Set("Content-Encoding", "br")
	if _, err := newCappedBody(r, 8); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Fatalf("a br body: err %v, want one saying to send plain or gzip", err)
	}
}
