package server

import (
	"container/list"
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
// connections it does not use only closes its own. Only when every
// connection counted against a limit is inside a request does the new one
// not get in: past the per-address limit it is refused (503), past the
// total limit Accept waits until one ends or waits (the kernel's listen
// queue holds the rest).
type connLimiter struct {
	net.Listener
	maxTotal, maxPerClient int
	log                    *slog.Logger

	mu      sync.Mutex
	changed *sync.Cond // a connection ended or began to wait, or the listener closed
	total   int
	clients map[string]*clientConns
	waiting list.List // *limitedConn, longest waiting first
	closed  bool

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
}

// limitLogEvery is how often at most the limiter logs that it refused or
// closed connections: under attack, once per connection would be a flood.
const limitLogEvery = time.Minute

func newConnLimiter(ln net.Listener, maxTotal, maxPerClient int, log *slog.Logger) *connLimiter {
	l := &connLimiter{Listener: ln, maxTotal: maxTotal, maxPerClient: maxPerClient, log: log,
		clients: map[string]*clientConns{}}
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
		if cc := l.clients[client]; cc != nil && cc.n >= l.maxPerClient {
			v := front(&cc.waiting)
			if v == nil {
				l.noteLocked(client, 1, 0)
				go refuse(c)
				return nil, nil
			}
			l.removeLocked(v)
			victims = append(victims, v)
			l.noteLocked(client, 0, 1)
			continue
		}
		if l.total >= l.maxTotal {
			if v := front(&l.waiting); v != nil {
				l.removeLocked(v)
				victims = append(victims, v)
				l.noteLocked(client, 0, 1)
				continue
			}
			l.changed.Wait()
			continue
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
	case http.StateNew, http.StateIdle:
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

func front(ls *list.List) *limitedConn {
	if e := ls.Front(); e != nil {
		return e.Value.(*limitedConn)
	}
	return nil
}

// refusal is the answer to a connection past its address's limit.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Retry-After: 5\r\nConnection: close\r\nContent-Length: 52\r\n\r\n" +
	"too many connections from your address; retry later\n"

func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write([]byte(refusal))
	c.Close()
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
