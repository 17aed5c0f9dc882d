package s3test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy stands between clients and a Server and puts faults in the way:
// answers of its own (a 503 storm, a skewed-clock refusal), stalls, and a
// hook once N body bytes have passed (to kill the server mid-transfer).
// Requests keep their Host header, so signatures stay valid.
type Proxy struct {
	// URL is the proxy's endpoint; give it to clients instead of the
	// server's.
	URL string

	mu       sync.Mutex
	fail     int // requests still to answer with failStatus
	failSt   int
	failCode string
	stall    time.Duration
	hookAt   int64
	hook     func()
	passed   atomic.Int64 // body bytes both ways
	requests atomic.Int64
	failed   atomic.Int64
}

// NewProxy starts a proxy to s, stopped when the test ends.
func NewProxy(t testing.TB, s *Server) *Proxy {
	t.Helper()
	target, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		r.Body = &countingBody{ReadCloser: r.Body, p: p}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		w.WriteHeader(http.StatusBadGateway)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		p.mu.Lock()
		stall := p.stall
		var status int
		var code string
		if p.fail != 0 {
			if p.fail > 0 {
				p.fail--
			}
			status, code = p.failSt, p.failCode
		}
		p.mu.Unlock()
		if stall > 0 {
			select {
			case <-time.After(stall):
			case <-r.Context().Done():
				return
			}
		}
		if status != 0 {
			p.failed.Add(1)
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by s3test.Proxy</Message><Resource>%s</Resource></Error>`, code, r.URL.Path)
			return
		}
		if r.Body != nil {
			r.Body = &countingBody{ReadCloser: r.Body, p: p}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

type countingBody struct {
	io.ReadCloser
	p *Proxy
}

func (b *countingBody) Read(q []byte) (int, error) {
	n, err := b.ReadCloser.Read(q)
	if n > 0 {
		total := b.p.passed.Add(int64(n))
		b.p.mu.Lock()
		hook, at := b.p.hook, b.p.hookAt
		if hook != nil && total >= at {
			b.p.hook = nil
		} else {
			hook = nil
		}
		b.p.mu.Unlock()
		if hook != nil {
			hook()
		}
	}
	return n, err
}

// Fail answers the next n requests (n < 0: every request until Heal) with
// status and the S3 error code (e.g. 503 "SlowDown", 403
// "RequestTimeTooSkewed"), without forwarding them.
func (p *Proxy) Fail(n, status int, code string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail, p.failSt, p.failCode = n, status, code
}

// Stall delays every request by d before forwarding it (0 ends it).
func (p *Proxy) Stall(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stall = d
}

// Heal ends Fail and Stall.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail, p.stall = 0, 0
}

// AfterBytes calls f once, from the transfer's goroutine, when n more
// body bytes (requests' and responses' together) have passed.
func (p *Proxy) AfterBytes(n int64, f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hookAt, p.hook = p.passed.Load()+n, f
}

// Requests is how many requests reached the proxy; Failed how many it
// answered itself.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Failed is how many requests Fail answered.
func (p *Proxy) Failed() int64 { return p.failed.Load() }

// BucketURL is s.BucketURL through the proxy.
func (p *Proxy) BucketURL(s *Server, prefix string) string { return s.BucketURL(p.URL, prefix) }
