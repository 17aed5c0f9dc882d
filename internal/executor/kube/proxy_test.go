package kube_test

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// proxy is a TCP proxy between an executor and the API server, standing
// for a load balancer: TLS passes through it untouched. With idle > 0 it
// cuts every connection that carried no byte either way for idle (as an
// idle timeout does); cutAll cuts every open connection at once; stop
// also refuses new ones (the process that owned them is gone).
type proxy struct {
	t      *testing.T
	l      net.Listener
	target string
	idle   time.Duration

	mu    sync.Mutex
	conns map[*proxyConn]struct{}
	done  bool

	accepted, idleCuts, cuts atomic.Int64
}

type proxyConn struct {
	a, b net.Conn
	last atomic.Int64 // UnixNano of the last byte either way
	once sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.a.Close()
		c.b.Close()
	})
}

// newProxy listens on 127.0.0.1 and forwards to host (a rest.Config.Host
// URL's host:port); it stops when the test ends.
func newProxy(t *testing.T, host string, idle time.Duration) *proxy {
	t.Helper()
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		t.Fatalf("API server address %q: %v", host, err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "443")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, l: l, target: target, idle: idle, conns: map[*proxyConn]struct{}{}}
	go p.serve()
	if idle > 0 {
		go p.reap()
	}
	t.Cleanup(p.stop)
	return p
}

// config is base with its Host pointing at the proxy; TLS still verifies
// the API server's name.
func (p *proxy) config(base *rest.Config) *rest.Config {
	rc := rest.CopyConfig(base)
	u, _ := url.Parse(base.Host)
	if rc.TLSClientConfig.ServerName == "" {
		rc.TLSClientConfig.ServerName = u.Hostname()
	}
	u.Host = p.l.Addr().String()
	rc.Host = u.String()
	return rc
}

func (p *proxy) serve() {
	for {
		a, err := p.l.Accept()
		if err != nil {
			return
		}
		b, err := net.DialTimeout("tcp", p.target, 10*time.Second)
		if err != nil {
			a.Close()
			continue
		}
		c := &proxyConn{a: a, b: b}
		c.last.Store(time.Now().UnixNano())
		p.mu.Lock()
		if p.done {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.accepted.Add(1)
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					c.last.Store(time.Now().UnixNano())
					if _, werr := dst.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.close()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}
		go pipe(b, a)
		go pipe(a, b)
	}
}

// reap cuts connections idle for longer than p.idle.
func (p *proxy) reap() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		p.mu.Lock()
		if p.done {
			p.mu.Unlock()
			return
		}
		now := time.Now().UnixNano()
		for c := range p.conns {
			if time.Duration(now-c.last.Load()) > p.idle {
				delete(p.conns, c)
				p.idleCuts.Add(1)
				go c.close()
			}
		}
		p.mu.Unlock()
	}
}

// cutAll cuts every open connection; it returns how many.
func (p *proxy) cutAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		delete(p.conns, c)
		go c.close()
	}
	p.cuts.Add(int64(n))
	return n
}

// stop refuses new connections and cuts the open ones. Idempotent.
func (p *proxy) stop() {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	p.l.Close()
	p.cutAll()
}
