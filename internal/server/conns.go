package server

import (
	"container/list"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimiter bounds the connections the server holds, in total and per
// client address (an IPv4 address, an IPv6 /64: one host usually has a
// whole /64). It wraps the listener and is the http.Server's ConnState
// hook.
//
// A connection that is not inside a request (accepted, with its first
// request's header not read yet, or idle between requests) is waiting.
// When a new connection would pass a limit, the connection that has been
// waiting longest, of the same address for the per-address limit, is
// closed to make room: stalled headers and idle keep-alives cannot crowd
// out a client that is about to send a request, and a client that opens
// connections it does not use only closes its own. A keep-alive idle for
// less than idleGrace (KeepAliveGrace) is not closed: its client is about to send its next
// request on it (a runner's next long poll follows the last at once), and
// closing it would only make that client dial again and close another's.
//
// When no connection counted against a limit can be closed, the new one
// is refused: 503 with Retry-After (refusal), which a runner retries with
// its backoff. Only while maxRefusing refusals are still being written
// (a flood) does Accept wait instead, until a connection ends or waits
// (the kernel's listen queue holds the rest): the descriptors held stay
// bounded by maxTotal plus maxRefusing.
type connLimiter struct {
	net.Listener
	maxTotal, maxPerClient int
	log                    *slog.Logger
	idleGrace              time.Duration
	maxRefusing            int

	mu       sync.Mutex
	changed  *sync.Cond // a connection ended or began to wait, or the listener closed
	total    int
	refusing int // refusals being written
	clients  map[string]*clientConns
	waiting  list.List // *limitedConn, longest waiting first
	closed   bool

	// what was refused or closed since the last log line about it
	refused, evicted int
	lastClient       string
	lastLog          time.Time
}

// clientConns are the connections of one client address.
type clientConns struct {
	n       int
	waiting list.List // *limitedConn, longest waiting first
}

// limitedConn is a connection counted by a connLimiter.
type limitedConn struct {
	net.Conn
	l          *connLimiter
	client     string
	elem       *list.Element // in l.waiting while waiting
	clientElem *list.Element // in the client's waiting while waiting
	gone       bool          // no longer counted
	// idleSince is when the connection's last request ended; zero while
	// its first request's header has not been read.
	idleSince time.Time
}

// limitLogEvery is how often at most the limiter logs that it refused or
// closed connections: under attack, once per connection would be a flood.
const limitLogEvery = time.Minute

// defaultMaxRefusing is connLimiter.maxRefusing's.
const defaultMaxRefusing = 256

func newConnLimiter(ln net.Listener, maxTotal, maxPerClient int, log *slog.Logger) *connLimiter {
	l := &connLimiter{Listener: ln, maxTotal: maxTotal, maxPerClient: maxPerClient, log: log,
		idleGrace: KeepAliveGrace, maxRefusing: defaultMaxRefusing, clients: map[string]*clientConns{}}
	l.changed = sync.NewCond(&l.mu)
	return l
}

// Accept returns the next connection that fits the limits, closing
// waiting connections to make room for it.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc, err := l.admit(c); err != nil || lc != nil {
			return lc, err
		}
	}
}

// admit counts c in, or refuses it (nil, nil). It waits while the total
// limit is reached by connections inside requests.
func (l *connLimiter) admit(c net.Conn) (*limitedConn, error) {
	client := clientKey(c.RemoteAddr())
	var victims []*limitedConn
	defer func() {
		for _, v := range victims {
			v.Conn.Close()
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.closed {
			c.Close()
			return nil, net.ErrClosed
		}
		now := time.Now()
		if cc := l.clients[client]; cc != nil && cc.n >= l.maxPerClient {
			v := l.victim(&cc.waiting, now)
			if v == nil {
				if !l.refuseLocked(c, client, refusalPerClient) {
					l.changed.Wait()
					continue
				}
				return nil, nil
			}
			l.removeLocked(v)
			victims = append(victims, v)
			l.noteLocked(client, 0, 1)
			continue
		}
		if l.total >= l.maxTotal {
			if v := l.victim(&l.waiting, now); v != nil {
				l.removeLocked(v)
				victims = append(victims, v)
				l.noteLocked(client, 0, 1)
				continue
			}
			if !l.refuseLocked(c, client, refusalTotal) {
				l.changed.Wait()
				continue
			}
			return nil, nil
		}
		break
	}
	lc := &limitedConn{Conn: c, l: l, client: client}
	cc := l.clients[client]
	if cc == nil {
		cc = &clientConns{}
		l.clients[client] = cc
	}
	cc.n++
	l.total++
	l.waitLocked(lc)
	return lc, nil
}

// connState is the http.Server's ConnState hook: it tracks which
// connections wait and which are inside a request.
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateNew:
		l.waitLocked(lc)
	case http.StateIdle:
		lc.idleSince = time.Now()
		l.waitLocked(lc)
	case http.StateActive:
		l.unwaitLocked(lc)
	case http.StateHijacked, http.StateClosed:
		l.removeLocked(lc)
	}
}

// waitLocked marks lc waiting, since now unless it already was.
func (l *connLimiter) waitLocked(lc *limitedConn) {
	if lc.gone || lc.elem != nil {
		return
	}
	lc.elem = l.waiting.PushBack(lc)
	lc.clientElem = l.clients[lc.client].waiting.PushBack(lc)
	l.changed.Broadcast()
}

func (l *connLimiter) unwaitLocked(lc *limitedConn) {
	if lc.elem == nil {
		return
	}
	l.waiting.Remove(lc.elem)
	l.clients[lc.client].waiting.Remove(lc.clientElem)
	lc.elem, lc.clientElem = nil, nil
}

// removeLocked stops counting lc (once).
func (l *connLimiter) removeLocked(lc *limitedConn) {
	if lc.gone {
		return
	}
	l.unwaitLocked(lc)
	lc.gone = true
	l.total--
	cc := l.clients[lc.client]
	if cc.n--; cc.n == 0 {
		delete(l.clients, lc.client)
	}
	l.changed.Broadcast()
}

// noteLocked counts a refused or closed connection and logs, at most once
// per limitLogEvery, how many there were.
func (l *connLimiter) noteLocked(client string, refused, evicted int) {
	l.refused += refused
	l.evicted += evicted
	l.lastClient = client
	if now := time.Now(); now.Sub(l.lastLog) >= limitLogEvery {
		l.log.Warn("connection limits reached: refused new connections or closed ones waiting for a request",
			"refused", l.refused, "closed", l.evicted, "client", client,
			"max_conns", l.maxTotal, "max_conns_per_client", l.maxPerClient)
		l.refused, l.evicted, l.lastLog = 0, 0, now
	}
}

// Close stops Accept, also one waiting for room.
func (l *connLimiter) Close() error {
	l.mu.Lock()
	l.closed = true
	l.changed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// victim is the connection of ls (longest waiting first) to close to
// make room: the first whose request header has not come yet, or that has
// been idle since its last request for at least idleGrace; nil if none.
func (l *connLimiter) victim(ls *list.List, now time.Time) *limitedConn {
	for e := ls.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*limitedConn); c.idleSince.IsZero() || now.Sub(c.idleSince) >= l.idleGrace {
			return c
		}
	}
	return nil
}

// refuseLocked answers c with refusal and closes it, in the background,
// unless maxRefusing refusals are being written already (false: the
// caller waits).
func (l *connLimiter) refuseLocked(c net.Conn, client, refusal string) bool {
	if l.refusing >= l.maxRefusing {
		return false
	}
	l.refusing++
	l.noteLocked(client, 1, 0)
	go func() {
		refuse(c, refusal)
		l.mu.Lock()
		l.refusing--
		l.changed.Broadcast()
		l.mu.Unlock()
	}()
	return true
}

// RetryAfterConnLimit is the Retry-After, in seconds, of the 503 answered
// to a connection past --max-conns or --max-conns-per-client.
const RetryAfterConnLimit = 5

// Answers to a connection past a limit, when none of the connections
// counted against it can be closed to make room.
var (
	refusalPerClient = refusalAnswer("too many connections from your address (the server's --max-conns-per-client); retry later")
	refusalTotal     = refusalAnswer("the server holds as many connections as it may (its --max-conns); retry later")
)

func refusalAnswer(msg string) string {
	return fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Retry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n", RetryAfterConnLimit, len(msg)+1, msg)
}

// refuseDrain bounds how long refuse reads what the client sent.
const refuseDrain = time.Second

// refuse writes answer to c and closes it. A TCP connection is first
// half-closed and what the client sends (its request, unread) read until
// the client closes or refuseDrain ends: closing a socket with unread
// bytes sends a reset, which can reach the client before the answer and
// destroy it there.
func refuse(c net.Conn, answer string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseDrain))
	if _, err := c.Write([]byte(answer)); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}
}

// clientKey is the address a connection counts against: its IPv4
// address, or its IPv6 /64.
func clientKey(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if v4 := ta.IP.To4(); v4 != nil {
		return v4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// Close stops counting the connection and closes it.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite lets net/http half-close a connection before it closes it
// (its answer reaches a client still sending a body it refused).
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
