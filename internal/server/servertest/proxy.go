package servertest

import (
	"net/http"
	"net/http/httputil"
	"net/url"
)

// Proxy returns a reverse proxy to backend (http://HOST:PORT), the load
// balancer of tests that put one in front of a server. Before forwarding a
// request it calls intercept, when not nil; intercept answers the request
// itself (and returns true) or lets it through. FlushInterval -1: long polls,
// followed logs and git's packs pass as they come.
//
// Every request is full duplex (net/http ResponseController.EnableFullDuplex):
// git's upload-pack answers while its request is still arriving, and Go's
// HTTP/1 server otherwise reads away and closes the rest of a request body
// when the answer's header goes out, under the proxy's own copy of that body
// to the server; the proxy's connection to the server was then closed in the
// middle of the answer ("use of closed network connection", curl 18). It
// panics if backend is not a URL.
func Proxy(backend string, intercept func(w http.ResponseWriter, r *http.Request) bool) http.Handler {
	u, err := url.Parse(backend)
	if err != nil {
		panic("servertest.Proxy: " + err.Error())
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	return FullDuplex(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if intercept != nil && intercept(w, r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
}

// FullDuplex wraps h, a handler that may write its answer before it has read
// all of the request, such as a proxy, so that the server leaves the request
// body to h (net/http ResponseController.EnableFullDuplex; HTTP/2 is full
// duplex already and ignores it).
func FullDuplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		h.ServeHTTP(w, r)
	})
}
