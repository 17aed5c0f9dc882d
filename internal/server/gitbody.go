package server

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Git request bodies are read through a cap (Config.MaxFetchRequest for
// fetches, MaxPushSize for pushes) that counts the bytes as they come,
// chunked or not, and the bytes they make once gzip is undone: a body
// past its cap is cut there, and one whose Content-Length says it is past
// is refused before any of it is read.

// errBodyTooLarge is what a capped body's Read returns once more than its
// cap arrived.
var errBodyTooLarge = errors.New("request body over its cap")

// capReader passes on at most max bytes of r; the read that would go past
// fails with errBodyTooLarge.
type capReader struct {
	r    io.Reader
	n    int64 // bytes passed on
	max  int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.over {
		return 0, errBodyTooLarge
	}
	// One byte more than is left tells a body that ends at the cap from
	// one that goes on.
	if left := c.max - c.n + 1; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := c.r.Read(p)
	if c.n+int64(n) > c.max {
		c.over = true
		n = int(c.max - c.n)
		c.n = c.max
		return n, errBodyTooLarge
	}
	c.n += int64(n)
	return n, err
}

// cappedBody is a git request's body with gzip undone, capped as sent and
// as made.
type cappedBody struct {
	io.Reader
	sent, made *capReader
}

// newCappedBody caps r's body at max bytes. It fails for a content
// encoding other than gzip (the only one git sends) and for a gzip body
// without a valid header.
func newCappedBody(r *http.Request, max int64) (*cappedBody, error) {
	b := &cappedBody{sent: &capReader{r: r.Body, max: max}}
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
		b.made = b.sent
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(b.sent)
		if err != nil {
			return nil, fmt.Errorf("bad gzip body: %w", err)
		}
		b.made = &capReader{r: zr, max: max}
	default:
		return nil, fmt.Errorf("unsupported content encoding %q: send the body plain or gzip", enc)
	}
	b.Reader = b.made
	return b, nil
}

// over reports whether the body went past its cap.
func (b *cappedBody) over() bool { return b.sent.over || b.made.over }

// size renders a byte count for messages: "10 MiB", "1.5 GiB", "512 bytes".
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	for i, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		div := int64(1) << (10 * (i + 1))
		if n < div*unit || u == "TiB" {
			s := strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64)
			return strings.TrimSuffix(s, ".0") + " " + u
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// writePkt writes one pkt-line.
func writePkt(w io.Writer, s string) {
	fmt.Fprintf(w, "%04x%s", len(s)+4, s)
}

// readPktLine reads one pkt-line's payload; nil for a flush (or another
// special packet).
func readPktLine(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	if err != nil {
		return nil, fmt.Errorf("bad pkt-line length %q", hdr[:])
	}
	if n < 4 {
		return nil, nil
	}
	p := make([]byte, n-4)
	_, err = io.ReadFull(r, p)
	return p, err
}

// cleanTmp removes what an earlier server left in DATA/tmp (the spools of
// requests cut by a crash): only the server holding the data directory's
// lock uses it.
func (s *Server) cleanTmp() {
	dir := s.tmpDir
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			s.log.Warn("remove leftover spool", "path", filepath.Join(dir, e.Name()), "err", err)
		}
	}
	if len(ents) > 0 {
		s.log.Info("removed leftover spools of an earlier server", "dir", dir, "files", len(ents))
	}
}
