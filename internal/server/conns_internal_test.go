package server

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipeListener hands out one end of net.Pipe pairs as accepted
// connections from the addresses a test names.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// limiterFixture is a connLimiter over a pipeListener whose Accept runs in
// the background: accepted delivers what it returns.
type limiterFixture struct {
	t        *testing.T
	ln       *pipeListener
	l        *connLimiter
	accepted chan net.Conn
}

func newLimiterFixture(t *testing.T, maxTotal, maxPerClient int) *limiterFixture {
	ln := newPipeListener()
	f := &limiterFixture{t: t, ln: ln, accepted: make(chan net.Conn, 16),
		l: newConnLimiter(ln, maxTotal, maxPerClient, slog.New(slog.DiscardHandler))}
	go func() {
		for {
			c, err := f.l.Accept()
			if err != nil {
				close(f.accepted)
				return
			}
			f.accepted <- c
		}
	}()
	t.Cleanup(func() { f.l.Close() })
	return f
}

// dial connects from ip and returns the client's end.
func (f *limiterFixture) dial(ip string) net.Conn {
	server, client := net.Pipe()
	f.t.Cleanup(func() { client.Close() })
	f.ln.conns <- addrConn{Conn: server, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1234}}
	return client
}

// accept returns the next connection the limiter let through, or fails.
func (f *limiterFixture) accept() net.Conn {
	f.t.Helper()
	select {
	case c := <-f.accepted:
		return c
	case <-time.After(5 * time.Second):
		f.t.Fatal("no connection accepted within 5s")
		return nil
	}
}

// notAccepted checks that no connection gets through for a while.
func (f *limiterFixture) notAccepted() {
	f.t.Helper()
	select {
	case c := <-f.accepted:
		f.t.Fatalf("connection from %s accepted, want it held back", c.RemoteAddr())
	case <-time.After(100 * time.Millisecond):
	}
}

// active marks c as inside a request, as http.Server does.
func (f *limiterFixture) active(c net.Conn) { f.l.connState(c, http.StateActive) }

// closedByServer reports whether the client end c sees its connection
// closed (after whatever the server wrote) within a second.
func closedByServer(c net.Conn) (bool, string) {
	c.SetReadDeadline(time.Now().Add(time.Second))
	b, err := io.ReadAll(c)
	return err == nil, string(b)
}

func TestConnLimiter_PerClientLimitClosesLongestWaitingFirst(t *testing.T) {
	f := newLimiterFixture(t, 100, 2)
	a1 := f.dial("10.0.0.1")
	f.accept()
	a2 := f.dial("10.0.0.1")
	f.accept()
	f.dial("10.0.0.1")
	f.accept()
	if closed, _ := closedByServer(a1); !closed {
		t.Fatal("third connection of 10.0.0.1: its first, waiting longest, is still open")
	}
	a2.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := a2.Read(make([]byte, 1)); err == io.EOF {
		t.Fatal("the second connection was closed too")
	}
	f.dial("10.0.0.2") // another client is not affected
	f.accept()
}

func TestConnLimiter_PerClientLimitRefusesWhenAllAreInRequests(t *testing.T) {
	f := newLimiterFixture(t, 100, 2)
	f.dial("10.0.0.1")
	f.active(f.accept())
	f.dial("10.0.0.1")
	f.active(f.accept())
	refused := f.dial("10.0.0.1")
	closed, answer := closedByServer(refused)
	if !closed || !strings.HasPrefix(answer, "HTTP/1.1 503 ") {
		t.Fatalf("third connection while two are in requests: closed %v, answer %q; want a 503 and close", closed, answer)
	}
	f.notAccepted()
	// An IPv6 client counts by /64: two addresses of one /64 are one client.
	f.dial("2001:db8::1")
	f.active(f.accept())
	f.dial("2001:db8::2")
	f.active(f.accept())
	if closed, _ := closedByServer(f.dial("2001:db8::3")); !closed {
		t.Fatal("third connection of one IPv6 /64 was not refused")
	}
	f.dial("2001:db8:0:1::1")
	f.accept()
}

// Before, past --max-conns Accept waited for a request to end and the
// new connection sat in the listen queue with no answer: a runner's next
// claim hung until its own timeout. It is refused now, saying which limit.
func TestConnLimiter_TotalLimitRefusesWhenAllAreInRequestsWith503AndRetryAfter(t *testing.T) {
	f := newLimiterFixture(t, 2, 2)
	f.dial("10.0.0.1")
	c1 := f.accept()
	f.active(c1)
	f.dial("10.0.0.2")
	f.active(f.accept())
	closed, answer := closedByServer(f.dial("10.0.0.3"))
	if !closed || !strings.HasPrefix(answer, "HTTP/1.1 503 ") || !strings.Contains(answer, "Retry-After: 5\r\n") ||
		!strings.Contains(answer, "--max-conns)") {
		t.Fatalf("third connection while two are in requests: closed %v, answer %q; want a 503 naming --max-conns, with Retry-After, and close", closed, answer)
	}
	f.notAccepted()
	c1.Close() // the request ended and its connection with it
	f.dial("10.0.0.3")
	if c3 := f.accept(); c3.RemoteAddr().String() != "10.0.0.3:1234" {
		t.Fatalf("accepted %s, want 10.0.0.3", c3.RemoteAddr())
	}
}

// Before, a keep-alive was closed for a new connection the moment its
// request ended: past --max-conns, 5,000 runners long-polling closed each
// other's connections between two polls (connection reset by peer) and
// dialled again, for ever.
func TestConnLimiter_AKeepAliveIdleUnderIdleGraceIsNotClosedForANewConnection(t *testing.T) {
	f := newLimiterFixture(t, 1, 1)
	f.l.idleGrace = 200 * time.Millisecond
	f.dial("10.0.0.1")
	c1 := f.accept()
	f.active(c1)
	f.l.connState(c1, http.StateIdle) // its request ended; its next comes at once
	if closed, answer := closedByServer(f.dial("10.0.0.2")); !closed || !strings.HasPrefix(answer, "HTTP/1.1 503 ") {
		t.Fatalf("new connection while the only one is idle for less than idleGrace: closed %v, answer %q; want 503", closed, answer)
	}
	f.notAccepted()
	time.Sleep(f.l.idleGrace)
	f.dial("10.0.0.2")
	f.accept()
	if _, err := c1.Write([]byte("x")); err == nil {
		t.Fatal("connection idle past idleGrace not closed to make room")
	}
}

// A flood of connections past the limits cannot make the server hold a
// descriptor for each while it answers them: past maxRefusing answers
// being written, Accept waits.
func TestConnLimiter_RefusalsBeingWrittenAreBoundedByMaxRefusing(t *testing.T) {
	f := newLimiterFixture(t, 1, 1)
	f.l.maxRefusing = 1
	f.dial("10.0.0.1")
	f.active(f.accept())
	slow := f.dial("10.0.0.2") // refused; it does not read the answer yet
	third := f.dial("10.0.0.3")
	third.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _ := third.Read(make([]byte, 1)); n > 0 {
		t.Fatal("a second refusal was written while the first was still being written (maxRefusing 1)")
	}
	if closed, answer := closedByServer(slow); !closed || !strings.HasPrefix(answer, "HTTP/1.1 503 ") {
		t.Fatalf("first refused connection: closed %v, answer %q", closed, answer)
	}
	if closed, answer := closedByServer(third); !closed || !strings.HasPrefix(answer, "HTTP/1.1 503 ") {
		t.Fatalf("connection that waited behind the first refusal: closed %v, answer %q; want 503 once it was written", closed, answer)
	}
	f.notAccepted()
}

func TestConnLimiter_CloseEndsAnAcceptWaitingForRoom(t *testing.T) {
	f := newLimiterFixture(t, 1, 1)
	f.l.maxRefusing = 0 // Accept waits rather than refuse
	f.dial("10.0.0.1")
	f.active(f.accept())
	go f.dial("10.0.0.2")
	f.notAccepted()
	f.l.Close()
	select {
	case _, ok := <-f.accepted:
		if ok {
			t.Fatal("a connection was accepted after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waiting 5s after Close")
	}
}
