package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultFetchStall fails a Fetch when no byte of the archive arrived for
// this long (Fetch.StallMS 0): a store that stopped answering.
const DefaultFetchStall = 30 * time.Second

// ErrFetchUnsupported is wrapped by Client.Fetch's error when the agent's
// hello does not list CapabilityFetch (an older agent): the caller moves
// the bytes another way (CopyIn). Nothing was sent.
var ErrFetchUnsupported = errors.New("the step agent does not fetch archives itself (an older agent)")

// Can reports whether an agent that sent hello serves the requests of
// capability (CapabilityFetch).
func (h AgentHello) Can(capability string) bool { return slices.Contains(h.Capabilities, capability) }

// Fetch asks the agent to download and unpack req (see the Fetch message)
// and checks that the bytes it read are req.Bytes with req.SHA256. It
// returns the agent's answer; an error when the agent cannot fetch
// (ErrFetchUnsupported: nothing was sent), refused the request (*Error),
// failed it (Fetched.Error: the store unreachable, a stall, a status, a
// damaged archive), or read other bytes. The agent removes what a failed
// fetch made (see RunFetch). A dropped connection is redialed and the
// request sent anew, up to 5 times: the agent ends a fetch whose
// connection ended, removes what it made, and runs one fetch at a time.
// Canceling ctx drops the connection, which ends the fetch in the agent.
func (c *Client) Fetch(ctx context.Context, req Fetch) (Fetched, error) {
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		cn, err := c.conn(ctx)
		if err != nil {
			return Fetched{}, err
		}
		c.mu.Lock()
		can := c.hello.Can(CapabilityFetch)
		c.mu.Unlock()
		if !can {
			return Fetched{}, ErrFetchUnsupported
		}
		got, err, broken := c.fetchOnce(ctx, cn, req)
		if !broken {
			return got, err
		}
		c.drop(cn, err)
		if ctx.Err() != nil {
			return Fetched{}, ctx.Err()
		}
		last = err
	}
	return Fetched{}, fmt.Errorf("fetch an archive: the connection to the step agent broke 5 times: %w", last)
}

// fetchOnce sends req on cn and waits for the answer; broken reports a
// connection failure (or ctx's end: the connection is then dropped, which
// stops the agent's fetch).
func (c *Client) fetchOnce(ctx context.Context, cn *Conn, req Fetch) (Fetched, error, bool) {
	if err := cn.WriteJSON(TypeFetch, req); err != nil {
		return Fetched{}, err, true
	}
	for {
		f, err := cn.next(ctx)
		if err != nil {
			return Fetched{}, err, true
		}
		switch f.Type {
		case TypeFetched:
			var d Fetched
			if err := Decode(f.Type, f.Payload, &d); err != nil {
				return d, err, true
			}
			switch {
			case d.Error != "":
				return d, fmt.Errorf("the step agent's fetch: %s", d.Error), false
			case d.Bytes != req.Bytes || d.SHA256 != req.SHA256:
				return d, fmt.Errorf("the step agent's fetch read %d bytes (sha256 %s), the archive has %d (sha256 %s)", d.Bytes, d.SHA256, req.Bytes, req.SHA256), false
			}
			return d, nil, false
		case TypeError:
			var e Error
			if err := Decode(f.Type, f.Payload, &e); err != nil {
				return Fetched{}, err, true
			}
			return Fetched{}, &e, false
		}
	}
}

// CheckFetch says what is wrong with req, or nil.
func CheckFetch(req Fetch) error {
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("fetch: the URL is not an http or https URL")
	}
	if b, err := hex.DecodeString(req.SHA256); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("fetch: sha256 %q is not 64 hex digits", req.SHA256)
	}
	if req.Bytes < 0 {
		return fmt.Errorf("fetch: %d bytes", req.Bytes)
	}
	if req.Compression != "" && req.Compression != CompressionZstd {
		return fmt.Errorf("fetch: unknown compression %q", req.Compression)
	}
	if len(req.Members) == 0 {
		return errors.New("fetch: no member to unpack")
	}
	return nil
}

// FetchConnectTimeout bounds a fetch's TCP connection and TLS handshake
// each: a store the environment may not reach (a NetworkPolicy that
// drops the packets) fails this soon, not after DefaultFetchStall.
const FetchConnectTimeout = 10 * time.Second

// NewFetchHTTPClient is the HTTP client RunFetch uses in the agent: the
// environment's proxy settings (HTTPS_PROXY, NO_PROXY), no transparent
// decompression (the bytes hashed are the object's), no cookies, no
// credentials; connecting bounded by FetchConnectTimeout. Its other
// bounds are RunFetch's stall watchdog and ctx.
func NewFetchHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: FetchConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = FetchConnectTimeout
	tr.DisableCompression = true
	tr.MaxIdleConnsPerHost = 1
	return &http.Client{Transport: tr}
}

// RunFetch does req in the agent: a GET of req.URL with hc, every byte
// hashed as it arrives, decompressed and unpacked by ExtractMembers. It
// fails when no byte arrived for req.StallMS (DefaultFetchStall), when
// ctx ends, on a status other than 200, on an archive whose length or
// SHA-256 is not req's (the unpacking may have failed first: damaged
// bytes are named as such), and on the unpacking's errors. After a
// failure it removes every file, directory and link it made; a file it
// replaced in a directory already there stays replaced by the archive's
// (the restore is then a miss for the runner, as a failed copy is). Errors
// never quote the URL's query (its signature).
func RunFetch(ctx context.Context, req Fetch, hc *http.Client) Fetched {
	var made Made
	res, err := runFetch(ctx, req, hc, &made)
	if err != nil {
		res.Error = err.Error()
		if uerr := made.Undo(); uerr != nil {
			res.Error += fmt.Sprintf(" (and what the fetch made could not all be removed: %v)", uerr)
		}
	}
	return res
}

// errFetchStalled is a fetch's context cause after a stall.
var errFetchStalled = errors.New("stalled")

func runFetch(ctx context.Context, req Fetch, hc *http.Client, made *Made) (Fetched, error) {
	if err := CheckFetch(req); err != nil {
		return Fetched{}, err
	}
	stall := DefaultFetchStall
	if req.StallMS > 0 {
		stall = time.Duration(req.StallMS) * time.Millisecond
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	clock := &stallClock{}
	clock.wait()
	go clock.watch(ctx, cancel, stall)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL, nil)
	if err != nil {
		return Fetched{}, errors.New("fetch: the URL is not valid")
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return Fetched{}, fetchFailed(ctx, stall, "connect to the store", req.URL, err)
	}
	defer resp.Body.Close()
	clock.done()
	if resp.StatusCode != http.StatusOK {
		return Fetched{}, statusError(resp)
	}
	pr := &fetchReader{r: io.LimitReader(resp.Body, req.Bytes+1), h: sha256.New(), clock: clock}
	var res Fetched
	dr, done, err := Decompress(pr, req.Compression)
	if err == nil {
		res.Files, res.Members, err = ExtractMembers(ctx, dr, req.Members, made)
		if err == nil && req.Compression != "" {
			_, err = io.Copy(io.Discard, dr) // to the end: the zstd checksum
		}
		done()
	}
	// Every byte through the hash: damaged bytes are named as such, also
	// where the unpacking failed on them first.
	_, _ = io.Copy(io.Discard, pr)
	res.Bytes, res.SHA256 = pr.n, hex.EncodeToString(pr.h.Sum(nil))
	switch {
	case ctx.Err() != nil:
		return res, fetchFailed(ctx, stall, "download", req.URL, ctx.Err())
	case pr.err != nil:
		return res, fetchFailed(ctx, stall, "download", req.URL, pr.err)
	case res.Bytes != req.Bytes || res.SHA256 != req.SHA256:
		return res, fmt.Errorf("the archive's bytes are not the store's entry: %d bytes (sha256 %.12s…), want %d (sha256 %.12s…)", res.Bytes, res.SHA256, req.Bytes, req.SHA256)
	case err != nil:
		return res, fmt.Errorf("unpack: %w", err)
	}
	return res, nil
}

// stallClock tells a stalled store from a slow disk: it measures only
// the time spent waiting for the store (connecting, then each read of
// the body), from the last byte or the start of the wait.
type stallClock struct {
	last    atomic.Int64 // UnixNano: the wait's start or its last byte
	waiting atomic.Bool
}

func (c *stallClock) wait() {
	c.last.Store(time.Now().UnixNano())
	c.waiting.Store(true)
}

func (c *stallClock) got() { c.last.Store(time.Now().UnixNano()) }

func (c *stallClock) done() { c.waiting.Store(false) }

// watch cancels ctx with errFetchStalled once a wait went on for more
// than stall with no byte.
func (c *stallClock) watch(ctx context.Context, cancel context.CancelCauseFunc, stall time.Duration) {
	t := time.NewTicker(max(stall/20, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if c.waiting.Load() && now.Sub(time.Unix(0, c.last.Load())) > stall {
				cancel(errFetchStalled)
				return
			}
		}
	}
}

// fetchFailed says err of step in one line: a stall as such, and the URL
// without its query.
func fetchFailed(ctx context.Context, stall time.Duration, step, raw string, err error) error {
	if errors.Is(context.Cause(ctx), errFetchStalled) {
		return fmt.Errorf("%s %s: no byte arrived for %s: given up", step, redactURL(raw), stall)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", step, &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err})
	}
	return fmt.Errorf("%s %s: %w", step, redactURL(raw), err)
}

// redactURL is raw without its query and user information.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(the URL)"
	}
	u.RawQuery, u.User, u.Fragment = "", nil, ""
	return u.String()
}

// statusError says an answer other than 200: its status, and the S3
// error's code and message when the body holds one.
func statusError(resp *http.Response) error {
	var s3 struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := fmt.Sprintf("the store answered %s", resp.Status)
	if xml.Unmarshal(body, &s3) == nil && s3.Code != "" {
		msg += ": " + s3.Code
		if s3.Message != "" {
			msg += ": " + strings.TrimSpace(s3.Message)
		}
	}
	return errors.New(msg)
}

// fetchReader counts and hashes what it reads, times its waits on the
// store (clock), and keeps the first read error (the network's).
type fetchReader struct {
	r     io.Reader
	h     hash.Hash
	n     int64
	err   error
	clock *stallClock
}

func (f *fetchReader) Read(b []byte) (int, error) {
	f.clock.wait()
	n, err := f.r.Read(b)
	f.clock.done()
	if n > 0 {
		f.h.Write(b[:n])
		f.n += int64(n)
	}
	if err != nil && !errors.Is(err, io.EOF) && f.err == nil {
		f.err = err
	}
	return n, err
}
