package scale

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxProxiedBody bounds the request bodies the proxy keeps to send again to
// another replica (the demo's pushes and log chunks are far smaller).
const maxProxiedBody = 32 << 20

// Proxy is the load balancer in front of the replicas: Go's
// httputil.ReverseProxy, round robin, with a request whose connection
// to a replica was refused (the replica is down) sent to the next one. A
// request a replica took and then died under is not sent again: its
// client sees a 502, as behind any load balancer.
type Proxy struct {
	mu       sync.Mutex
	backends []*url.URL
	down     map[string]time.Time // host → until when it is skipped
	next     atomic.Uint64
	handler  *httputil.ReverseProxy
	base     http.RoundTripper
}

// NewProxy returns a proxy over the replicas at backends
// (http://127.0.0.1:PORT).
func NewProxy(backends []string) (*Proxy, error) {
	p := &Proxy{down: map[string]time.Time{}}
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			return nil, err
		}
		p.backends = append(p.backends, u)
	}
	p.base = &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
	p.handler = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.Out.URL.Scheme = "http"; r.SetXForwarded() },
		Transport:     p,
		FlushInterval: -1, // stream log follows and git as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p, nil
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.handler.ServeHTTP(w, r) }

// RoundTrip sends req to the next replica that accepts the connection.
func (p *Proxy) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxProxiedBody+1))
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(b) > maxProxiedBody {
			return nil, fmt.Errorf("request body over %d bytes", maxProxiedBody)
		}
		body = b
	}
	var lastErr error
	for range 2 * len(p.backends) {
		u := p.pick()
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, req.Host
		if body != nil {
			out.Body = io.NopCloser(bytes.NewReader(body))
			out.ContentLength = int64(len(body))
		}
		resp, err := p.base.RoundTrip(out)
		if err == nil {
			return resp, nil
		}
		lastErr = err
		if !refused(err) {
			return nil, err // the replica had the request: not ours to repeat
		}
		p.markDown(u.Host)
	}
	return nil, fmt.Errorf("no replica accepts connections: %w", lastErr)
}

// refused reports whether err is a connection the replica never accepted.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

func (p *Proxy) pick() *url.URL {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for range len(p.backends) {
		u := p.backends[p.next.Add(1)%uint64(len(p.backends))]
		if now.After(p.down[u.Host]) {
			return u
		}
	}
	return p.backends[p.next.Add(1)%uint64(len(p.backends))]
}

func (p *Proxy) markDown(host string) {
	p.mu.Lock()
	p.down[host] = time.Now().Add(time.Second)
	p.mu.Unlock()
}
