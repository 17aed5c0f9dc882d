package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what one client, honest or not, can hold of the server: a
// connection slot, the memory of a request header, a goroutine and an open
// file. Zero fields take the Default* values below.
//
// Nothing bounds a request's total time: long polls (60 s), log follows,
// git pushes and fetches and a runner's log chunks legitimately take long.
// What is bounded is how long the other side may make no progress: a
// header that does not end, a body that stops coming or comes slower than
// BodyMinRate, an answer nobody reads.
type Limits struct {
	// MaxConns bounds the connections held at once. When a new one would
	// pass it, the one that has waited longest for a request (not a
	// keep-alive idle for less than KeepAliveGrace) is closed; if none can be, the new one
	// is refused: 503 with Retry-After (RetryAfterConnLimit), naming
	// --max-conns.
	MaxConns int
	// MaxConnsPerClient bounds the connections of one client address (an
	// IPv4 address, an IPv6 /64). Past it, the address's connection that
	// has waited longest for a request is closed, as for MaxConns, or the
	// new one is refused (503, naming --max-conns-per-client). Behind a reverse proxy every
	// client has the proxy's address: raise it to about MaxConns.
	MaxConnsPerClient int
	// HeaderTimeout is how long a request's header may take to arrive.
	HeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (431 past it).
	MaxHeaderBytes int
	// IdleTimeout closes a keep-alive connection with no request for
	// this long. It is longer than Go clients' own 90 s, so that they,
	// not the server, close idle connections (no request races a close).
	IdleTimeout time.Duration
	// BodyStall is how long a request body may send nothing.
	BodyStall time.Duration
	// BodyMinRate is the slowest a request body may come on average, in
	// bytes per second, after a first BodyStall of allowance.
	BodyMinRate int64
	// WriteStall is how long the server waits for the client to take the
	// next part of an answer (a log, a pack) before it hangs up.
	WriteStall time.Duration
}

// KeepAliveGrace is how long a connection idle between requests is not
// closed to make room for a new one (Limits.MaxConns, MaxConnsPerClient):
// its client is about to send its next request on it, as a runner's next
// claim follows the last at once, a round trip later. It covers a slow
// network's round trip.
const KeepAliveGrace = time.Second

// Defaults of Limits.
const (
	DefaultMaxConns          = 4096
	DefaultMaxConnsPerClient = 512
	DefaultHeaderTimeout     = 10 * time.Second
	DefaultMaxHeaderBytes    = 16 << 10
	DefaultIdleTimeout       = 120 * time.Second
	DefaultBodyStall         = 30 * time.Second
	DefaultBodyMinRate       = 4 << 10
	DefaultWriteStall        = 30 * time.Second
)

func (l *Limits) fill() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxConns, DefaultMaxConns)
	def(&l.MaxConnsPerClient, DefaultMaxConnsPerClient)
	def(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	defDur(&l.HeaderTimeout, DefaultHeaderTimeout)
	defDur(&l.IdleTimeout, DefaultIdleTimeout)
	defDur(&l.BodyStall, DefaultBodyStall)
	defDur(&l.WriteStall, DefaultWriteStall)
	if l.BodyMinRate <= 0 {
		l.BodyMinRate = DefaultBodyMinRate
	}
	l.MaxConnsPerClient = min(l.MaxConnsPerClient, l.MaxConns)
}

// withDeadlines puts every request's body and answer under the progress
// bounds of Limits, with the connection's read and write deadlines (set
// through http.ResponseController).
func (s *Server) withDeadlines(h http.Handler) http.Handler {
	lim := s.cfg.Limits
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		// Replaces whatever the previous request on this connection left;
		// bounds what net/http itself writes (100 Continue).
		_ = rc.SetWriteDeadline(time.Now().Add(lim.WriteStall))
		dw := &deadlineWriter{ResponseWriter: w, rc: rc, stall: lim.WriteStall}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			b := &deadlineBody{body: r.Body, rc: rc, stall: lim.BodyStall, rate: lim.BodyMinRate}
			dw.body = b
			defer b.finish()
			// A shallow copy: net/http's own request keeps its own body,
			// whose leftovers it handles after the handler (see finish).
			r = r.WithContext(r.Context())
			r.Body = b
		}
		h.ServeHTTP(dw, r)
	})
}

// leftoverGrace is how long net/http may go on reading what a handler left
// of a body once it returned (see deadlineBody.finish).
const leftoverGrace = time.Second

// errBodyTooSlow is what reading a body that broke Limits returns.
var errBodyTooSlow = errors.New("request body too slow")

// deadlineBody sets the connection's read deadline before each read of a
// request body: at most BodyStall from now, and no later than what the
// bytes read so far earn at BodyMinRate (after a first BodyStall). At the
// body's end the deadline is lifted: net/http then watches the
// connection for the client going away, and a deadline hit there would
// cancel the request (a long poll, a fetch) as if it had.
type deadlineBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	stall time.Duration
	rate  int64

	mu      sync.Mutex
	started time.Time
	n       int64
	eof     bool // the body was read to its end
	done    bool // the handler returned
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if !b.eof && !b.done {
		now := time.Now()
		if b.started.IsZero() {
			b.started = now
		}
		d := now.Add(b.stall)
		if earned := b.started.Add(b.stall + time.Duration(float64(b.n)/float64(b.rate)*float64(time.Second))); earned.Before(d) {
			d = earned
		}
		_ = b.rc.SetReadDeadline(d)
	}
	b.mu.Unlock()
	n, err := b.body.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += int64(n)
	if err == io.EOF && !b.eof {
		b.eof = true
		if !b.done {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		err = fmt.Errorf("%w: %d bytes in %s (it may pause at most %s and must average %d bytes/s)",
			errBodyTooSlow, b.n, time.Since(b.started).Round(time.Millisecond), b.stall, b.rate)
	}
	return n, err
}

func (b *deadlineBody) Close() error { return b.body.Close() }

func (b *deadlineBody) readToEnd() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// finish runs when the handler returned. net/http then reads up to
// 256 KiB of what is left of the body, to reuse the connection (larger
// leftovers it does not read: it answers and closes), with whatever read
// deadline is set: none, so a client refused for its credentials could
// hold the connection by trickling its body. It gets leftoverGrace
// (at most BodyStall) for them, enough for an honest client that sent its
// body at once, after which the connection closes.
func (b *deadlineBody) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	if !b.eof {
		_ = b.rc.SetReadDeadline(time.Now().Add(min(leftoverGrace, b.stall)))
	}
}

// writeChunk is the most one write deadline covers: a client must take
// this much of an answer every WriteStall.
const writeChunk = 64 << 10

// deadlineWriter sets the connection's write deadline to WriteStall from
// now before each part of an answer, so that a client that stops reading
// (a log follow, a fetch) is hung up on instead of holding its
// connection, a goroutine and maybe an open log file for ever. A global
// http.Server.WriteTimeout would instead cut long polls and long answers
// that are read just fine.
//
// It also closes the connection after an error answer to a request whose
// body was not read to its end (a refused token, a body too large):
// net/http would otherwise first read up to 256 KiB of the rest, and only
// then answer.
type deadlineWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	body  *deadlineBody // nil for requests without a body
}

func (w *deadlineWriter) WriteHeader(code int) {
	if code >= 400 && w.body != nil && !w.body.readToEnd() {
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		c := min(len(p), writeChunk)
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall))
		m, err := w.ResponseWriter.Write(p[:c])
		n += m
		if err != nil {
			return n, err
		}
		p = p[c:]
	}
	return n, nil
}

// FlushError is what http.ResponseController.Flush calls.
func (w *deadlineWriter) FlushError() error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.stall))
	return w.rc.Flush()
}

// Flush implements http.Flusher.
func (w *deadlineWriter) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
