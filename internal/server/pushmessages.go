package server

import (
	"bytes"
	"net/http"
	"strings"
)

// What a push says back. git shows the side band's channel 2 of
// receive-pack's answer as "remote: ..." lines (gitprotocol-pack:
// side-band-64k), which is where a pusher looks first: each branch or tag
// the push changed gets a line saying what Knotless made of it, the
// pipeline and its runs, or why nothing runs, and the pipeline's notes (an
// entry of .knotless/workflows that is not a workflow, a directory that is
// never looked at).

// heldFlush passes receive-pack's side-band answer through but for its
// last four bytes, the flush-pkt that ends it, so that lines can go
// before it (finish).
type heldFlush struct {
	http.ResponseWriter
	held []byte
}

func (h *heldFlush) Write(p []byte) (int, error) {
	buf := append(h.held, p...)
	keep := min(len(buf), 4)
	if _, err := h.ResponseWriter.Write(buf[:len(buf)-keep]); err != nil {
		return 0, err
	}
	h.held = append(h.held[:0:0], buf[len(buf)-keep:]...)
	return len(p), nil
}

// Flush flushes what was written, the held bytes excepted.
func (h *heldFlush) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// finish writes lines on channel 2 and then the held flush-pkt; when the
// answer did not end in one (git failed, or spoke no side band), it
// writes what it held and no line.
func (h *heldFlush) finish(lines []string) {
	var out bytes.Buffer
	if string(h.held) == "0000" {
		for _, l := range lines {
			writePkt(&out, "\x02"+pushLine(l)+"\n")
		}
	}
	out.Write(h.held)
	_, _ = h.ResponseWriter.Write(out.Bytes())
}

// pushLine is one "remote:" line: "Knotless: " and l, cut to what a
// side-band packet holds.
func pushLine(l string) string {
	l = "Knotless: " + l
	if len(l) > 1000 {
		l = strings.ToValidUTF8(l[:1000], "") + "..."
	}
	return l
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
