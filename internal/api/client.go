package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Error is an XRPC error answered by the server (any non-2xx status), or
// made by the client for a response it could not read.
type Error struct {
	Status  int    `json:"-"`              // HTTP status code
	Name    string `json:"error"`          // e.g. ErrNotFound
	Message string `json:"message"`        // person-readable
	Size    *int64 `json:"size,omitempty"` // with ErrOffsetGap: bytes stored
	// RetryAfter is the answer's Retry-After (RFC 9110 10.2.3, in
	// seconds), the least wait the server asks for before a retry; 0 when
	// absent. RetryWait waits at least that long.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Name, e.Status)
	}
	return fmt.Sprintf("%s: %s", e.Name, e.Message)
}

// IsError reports whether err is an *Error with the given name.
func IsError(err error, name string) bool {
	var e *Error
	return errors.As(err, &e) && e.Name == name
}

// Retryable reports whether a call that failed with err may succeed when
// repeated unchanged: transport errors, 5xx answers and 429. 4xx answers are
// final.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return RetryableStatus(e.Status)
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// RetryableStatus reports whether an HTTP answer with status code may be
// followed by success when the request is repeated unchanged: 5xx (a
// proxy's 502 included) and 429.
func RetryableStatus(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests
}

// AuthFunc sets credentials on a request for the method nsid.
type AuthFunc func(req *http.Request, nsid string) error

// BearerToken returns an AuthFunc that sends an account API token.
func BearerToken(token string) AuthFunc {
	return func(req *http.Request, _ string) error {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return nil
	}
}

// Client calls XRPC methods of one server. The zero HTTP field means
// http.DefaultClient. A Client is safe for concurrent use.
type Client struct {
	// BaseURL is the server's URL, e.g. "http://127.0.0.1:8080".
	BaseURL string
	HTTP    *http.Client
	Auth    AuthFunc
	// UserAgent is sent on every request when set.
	UserAgent string
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// URL returns the address of method nsid with params as its query string.
func (c *Client) URL(nsid string, params url.Values) string {
	u := strings.TrimRight(c.BaseURL, "/") + "/xrpc/" + nsid
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	return u
}

// Query calls a query method (GET) and decodes its JSON answer into out
// (which may be nil). Errors: *Error for non-2xx answers, or the transport's.
func (c *Client) Query(ctx context.Context, nsid string, params url.Values, out any) error {
	resp, err := c.Do(ctx, http.MethodGet, nsid, params, "", nil)
	if err != nil {
		return err
	}
	return decodeBody(resp, out)
}

// Procedure calls a procedure method (POST) with in encoded as JSON (nil
// sends no body) and decodes the JSON answer into out (which may be nil).
func (c *Client) Procedure(ctx context.Context, nsid string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s input: %w", nsid, err)
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.Do(ctx, http.MethodPost, nsid, nil, ctype, body)
	if err != nil {
		return err
	}
	return decodeBody(resp, out)
}

// Sized is a request body whose length Do cannot see otherwise (it sees
// that of a *bytes.Reader, *bytes.Buffer or *strings.Reader): Do sends
// Size() as its Content-Length instead of a chunked body. It must hold
// exactly that many bytes.
type Sized interface {
	io.Reader
	Size() int64
}

// Do sends one request and returns the response when its status is 2xx; the
// caller closes its body. A non-2xx answer is returned as *Error, its body
// consumed and closed.
func (c *Client) Do(ctx context.Context, method, nsid string, params url.Values, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL(nsid, params), body)
	if err != nil {
		return nil, fmt.Errorf("build %s request: %w", nsid, err)
	}
	if s, ok := body.(Sized); ok {
		req.ContentLength = s.Size()
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	if c.Auth != nil {
		if err := c.Auth(req, nsid); err != nil {
			return nil, fmt.Errorf("authenticate %s: %w", nsid, err)
		}
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nsid, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode}
	if secs, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(min(secs, 3600)) * time.Second
	}
	if json.Unmarshal(data, e) != nil || e.Name == "" {
		e.Name = http.StatusText(resp.StatusCode)
		e.Message = strings.TrimSpace(string(data))
	}
	return nil, e
}

func decodeBody(resp *http.Response, out any) error {
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode answer of %s: %w", resp.Request.URL.Path, err)
	}
	return nil
}

// Backoff returns the wait before retry attempt n (0-based): 200 ms doubling,
// capped at max.
func Backoff(n int, max time.Duration) time.Duration {
	d := 200 * time.Millisecond
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// UnreachableBackoff caps RetryWait's waits while the server cannot be
// reached at all (see Unreachable): about a second, so that a runner
// notices a server that is back within a second or two of its return.
const UnreachableBackoff = time.Second

// Unreachable reports whether err says that nothing answered at the
// server's address: the connection was refused, reset before an answer, or
// there is no route, or a proxy in front of it answered 502 (its upstream is
// gone). Retrying such a call costs the server nothing, so it may be
// retried often; an answer (a 5xx, a 429) or a timeout says the server is
// there but struggling, and is retried with the full backoff.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusBadGateway
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// RetryWait returns the wait before retry attempt n (0-based) of a call
// that failed with err: Backoff capped at max, or at UnreachableBackoff
// when the server is Unreachable, with jitter (between half of it and all
// of it) so that runners waiting out the same outage do not come back in
// step. When the server said how long to wait (Error.RetryAfter, e.g. a
// 503 past its --max-conns), the wait is at least that, spread by up to a
// fifth more.
func RetryWait(n int, err error, max time.Duration) time.Duration {
	if Unreachable(err) {
		max = min(max, UnreachableBackoff)
	}
	d := Backoff(n, max)
	wait := d/2 + rand.N(d/2+1)
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > wait {
		wait = e.RetryAfter + rand.N(e.RetryAfter/5+1)
	}
	return wait
}
