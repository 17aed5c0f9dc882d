package servertest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"
)

// TestProxy_AnswerBeginningBeforeItsRequestEndsArrivesWhole pins CI's
// failure of TestMirrors_GitFetchFallbackTrustsTheCAOfSSLCertFile ("git
// fetch: curl 18 transfer closed with outstanding read data remaining",
// the proxy: "read error during body copy: use of closed network
// connection"): git's upload-pack answers while its request still arrives,
// and the test proxy's own HTTP server read away and closed the rest of the
// request body when the answer's header went out, under the proxy's copy of
// that body to the server. Here the client sends the rest of its request
// only after the answer has begun, so a proxy that is not full duplex never
// passes the answer (the plain ReverseProxy below is the positive control).
func TestProxy_AnswerBeginningBeforeItsRequestEndsArrivesWhole(t *testing.T) {
	backend := httptest.NewServer(FullDuplex(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := bufio.NewReader(r.Body)
		first, err := in.ReadString('\n')
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "begun after "+first)
		http.NewResponseController(w).Flush()
		rest, err := io.ReadAll(in)
		if err != nil {
			return
		}
		_, _ = io.WriteString(w, "then "+string(rest))
	})))
	t.Cleanup(backend.Close)

	send := func(t *testing.T, front string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pr, pw := io.Pipe()
		// The transport waits for its copy of the body to end, even after ctx.
		defer context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, front, pr)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.WriteString(pw, "want\n") }()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		in := bufio.NewReader(resp.Body)
		begun, err := in.ReadString('\n')
		if err != nil {
			return begun, err
		}
		_, _ = io.WriteString(pw, "done\n")
		pw.Close()
		rest, err := io.ReadAll(in)
		return begun + string(rest), err
	}

	t.Run("plain ReverseProxy (control)", func(t *testing.T) {
		u, _ := url.Parse(backend.URL)
		plain := httptest.NewServer(httputil.NewSingleHostReverseProxy(u))
		t.Cleanup(plain.Close)
		if got, err := send(t, plain.URL); err == nil {
			t.Fatalf("an answer that began before its request ended passed a half-duplex proxy (%q): this test no longer shows what the proxy needs", got)
		}
	})
	t.Run("Proxy", func(t *testing.T) {
		front := httptest.NewServer(Proxy(backend.URL, nil))
		t.Cleanup(front.Close)
		got, err := send(t, front.URL)
		if err != nil || got != "begun after want\nthen done\n" {
			t.Fatalf("through the proxy: %q, %v; want the whole answer", got, err)
		}
	})
}
