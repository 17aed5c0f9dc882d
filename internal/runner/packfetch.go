package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
)

// A run's commit reaches the mirror in one request to the server's
// upload-pack (git's smart HTTP, stateless): the commit as the want, the
// mirror's newest commits as haves, "done"; the pack that comes back goes
// to `git index-pack`, and a ref names the commit. `git fetch` does the
// same with four more processes (remote-http twice, a connectivity walk,
// maintenance) and a request more (the ref advertisement, which a fetch by
// SHA does not need). Checkout falls back to `git fetch` when this fails.

// errRefused is matched by the error of a fetch the server refused (401,
// 403, 404): no point trying again another way.
var errRefused = errors.New("the server refused the fetch")

// maxHaves bounds the commits offered as haves: the newest refs of the
// mirror, where a new commit's parents almost always are.
const maxHaves = 32

// fetchPack fetches commit sha from the repository at url (http or https)
// into mirror, authenticating with token as the basic-auth password.
func fetchPack(ctx context.Context, mirror, url, sha, token string) error {
	return fetchPackWants(ctx, mirror, url, []string{sha}, token)
}

// fetchPackWants is fetchPack of several objects (commits, tags) at once;
// a ref refs/knotless/<oid> keeps each one. A failure on the way (no
// connection, a 5xx or 429 answer, e.g. a proxy's 502 when the server
// closed the connection it reused; a connection cut in the middle of the
// pack) is tried again, up to transientTries in all; a refusal or an
// upload-pack error is not.
func fetchPackWants(ctx context.Context, mirror, url string, wants []string, token string) error {
	return retryTransient(ctx, func() error { return fetchPackOnce(ctx, mirror, url, wants, token) })
}

// transientTries is how often a request that failed on the way is made
// in all, transientPause the pause before the second (doubled before
// each one after).
const (
	transientTries = 3
	transientPause = 250 * time.Millisecond
)

// transientError marks a failure on the way to the server or back, which
// the same request may not meet again.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// transient marks err as a failure on the way (nil stays nil).
func transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

// retryTransient calls try until it succeeds, fails in a way that is not
// transient, ctx ends, or it was called transientTries times; it returns
// try's last error.
func retryTransient(ctx context.Context, try func() error) error {
	pause := transientPause
	for i := 1; ; i++ {
		err := try()
		var te *transientError
		if err == nil || i == transientTries || !errors.As(err, &te) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// fetchPackOnce is one try of fetchPackWants.
func fetchPackOnce(ctx context.Context, mirror, url string, wants []string, token string) error {
	var body bytes.Buffer
	writePkt(&body, "want "+wants[0]+" side-band-64k ofs-delta no-progress agent=knotless-run\n")
	for _, w := range wants[1:] {
		writePkt(&body, "want "+w+"\n")
	}
	body.WriteString("0000")
	for _, h := range newestRefs(mirror, maxHaves) {
		writePkt(&body, "have "+h+"\n")
	}
	writePkt(&body, "done\n")

	// index-pack starts while the request goes out and the server makes
	// the pack: starting a process takes as long as a round trip. Its
	// stdin is an OS pipe, so that the pack's writes fail (EPIPE) when it
	// ends early (a broken mirror) rather than wait for a reader forever.
	cmd := exec.CommandContext(ctx, "git", "-C", mirror, "index-pack", "--stdin")
	cmd.Env = gitEnv(nil)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("git index-pack: %w", err)
	}
	started := make(chan error, 1)
	go func() { started <- cmd.Start() }() // a failed Start closes the pipe's other end
	copyErr := requestPack(ctx, url, token, &body, stdin)
	_ = stdin.Close()
	if err := <-started; err != nil {
		return fmt.Errorf("git index-pack: %w", err)
	}
	if copyErr != nil {
		_ = cmd.Process.Kill() // it holds part of a pack at most
		waitErr := cmd.Wait()
		if errors.Is(copyErr, syscall.EPIPE) { // it had ended: its words say why
			return fmt.Errorf("git index-pack: %v: %s", waitErr, strings.TrimSpace(out.String()))
		}
		return copyErr
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git index-pack: %w: %s", err, strings.TrimSpace(out.String()))
	}
	for _, w := range wants {
		if err := writeRef(mirror, "refs/knotless/"+w, w); err != nil {
			return err
		}
	}
	return nil
}

// advertisedRefs asks the server for the refs of the repository at url
// (GET info/refs, git's smart HTTP, protocol v0) and returns its branches
// and tags, with the object an annotated tag peels to.
// A failure on the way is tried again as fetchPackWants does.
func advertisedRefs(ctx context.Context, url, token string) (refs []ref, err error) {
	err = retryTransient(ctx, func() error {
		refs, err = advertisedRefsOnce(ctx, url, token)
		return err
	})
	return refs, err
}

// advertisedRefsOnce is one try of advertisedRefs.
func advertisedRefsOnce(ctx context.Context, url, token string) ([]ref, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/info/refs?service=git-upload-pack", nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("knotless-run:"+token)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, transient(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("info/refs: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
		if api.RetryableStatus(resp.StatusCode) {
			err = transient(err)
		}
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-git-upload-pack-advertisement" {
		return nil, fmt.Errorf("info/refs: answer of type %q", ct)
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var refs []ref
	byName := map[string]int{}
	flushes := 0
	for flushes < 2 {
		p, err := readPkt(r)
		if err != nil {
			return nil, cutOff(fmt.Errorf("info/refs: %w", err))
		}
		if p == nil {
			flushes++
			continue
		}
		line := strings.TrimSuffix(string(p), "\n")
		if flushes == 0 {
			continue // "# service=git-upload-pack"
		}
		line, _, _ = strings.Cut(line, "\x00") // capabilities
		oid, name, ok := strings.Cut(line, " ")
		if !ok || !shaRE.MatchString(oid) {
			continue
		}
		if base, peeled := strings.CutSuffix(name, "^{}"); peeled {
			if i, ok := byName[base]; ok {
				refs[i].peeled = oid
			}
			continue
		}
		if strings.HasPrefix(name, "refs/heads/") || strings.HasPrefix(name, "refs/tags/") {
			byName[name] = len(refs)
			refs = append(refs, ref{name: name, oid: oid})
		}
	}
	return refs, nil
}

// requestPack posts body to the upload-pack of the repository at url and
// writes the pack of the answer to w.
func requestPack(ctx context.Context, url, token string, body io.Reader, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(url, "/")+"/git-upload-pack", body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	req.Header.Set("Accept", "application/x-git-upload-pack-result")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("knotless-run:"+token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return transient(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("upload-pack: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
		if api.RetryableStatus(resp.StatusCode) {
			err = transient(err)
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %s", errRefused, strings.TrimSpace(string(msg)))
		}
		return err
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-git-upload-pack-result" {
		return fmt.Errorf("upload-pack: answer of type %q", ct)
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	// ACK or NAK lines, then the pack on side band 1.
	for {
		line, err := peekPkt(r)
		if err != nil {
			return cutOff(fmt.Errorf("upload-pack: %w", err))
		}
		if len(line) > 0 && line[0] <= 3 {
			break
		}
		if _, err := readPkt(r); err != nil {
			return cutOff(fmt.Errorf("upload-pack: %w", err))
		}
		switch s := string(line); {
		case strings.HasPrefix(s, "ERR "):
			return fmt.Errorf("upload-pack: %s", strings.TrimSpace(s[4:]))
		case strings.HasPrefix(s, "ACK ") || strings.HasPrefix(s, "NAK"):
		default:
			return fmt.Errorf("upload-pack: unexpected %q", s)
		}
	}
	return demuxPack(r, w)
}

// demuxPack copies side band 1 of an upload-pack answer to w until the
// flush that ends it; band 3 is the server's error.
func demuxPack(r *bufio.Reader, w io.Writer) error {
	for {
		p, err := readPkt(r)
		if err != nil {
			return cutOff(fmt.Errorf("upload-pack: %w", err))
		}
		if p == nil {
			return nil // flush: the pack is whole
		}
		switch p[0] {
		case 1:
			if _, err := w.Write(p[1:]); err != nil {
				return fmt.Errorf("git index-pack: %w", err)
			}
		case 3:
			return fmt.Errorf("upload-pack: %s", strings.TrimSpace(string(p[1:])))
		}
	}
}

func writePkt(b *bytes.Buffer, s string) { fmt.Fprintf(b, "%04x%s", len(s)+4, s) }

// readPkt reads one pkt-line: its payload, nil for a flush.
func readPkt(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, unexpectedEOF(err)
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	if err != nil {
		return nil, fmt.Errorf("bad pkt-line length %q", hdr[:])
	}
	if n == 0 {
		return nil, nil
	}
	if n < 4 {
		return nil, fmt.Errorf("bad pkt-line length %d", n)
	}
	p := make([]byte, n-4)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, unexpectedEOF(err)
	}
	return p, nil
}

// peekPkt returns the next pkt-line's payload without consuming it (nil
// for a flush).
func peekPkt(r *bufio.Reader) ([]byte, error) {
	hdr, err := r.Peek(4)
	if err != nil {
		return nil, unexpectedEOF(err)
	}
	n, err := strconv.ParseUint(string(hdr), 16, 16)
	if err != nil || (n > 0 && n < 4) {
		return nil, fmt.Errorf("bad pkt-line length %q", hdr)
	}
	if n == 0 {
		return nil, nil
	}
	p, err := r.Peek(int(n))
	if err != nil {
		return nil, unexpectedEOF(err)
	}
	return p[4:], nil
}

// cutOff marks err transient when the answer broke off: it ended early
// or its connection failed (not when it was malformed).
func cutOff(err error) error {
	var ne net.Error
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNRESET) {
		return transient(err)
	}
	return err
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// newestRefs returns the commits of up to n of the mirror's
// refs/knotless/* refs (one per commit fetched, named by it), newest first.
func newestRefs(mirror string, n int) []string {
	ents, err := os.ReadDir(filepath.Join(mirror, "refs", "knotless"))
	if err != nil {
		return nil
	}
	type ref struct {
		sha string
		at  time.Time
	}
	var refs []ref
	for _, e := range ents {
		if !shaRE.MatchString(e.Name()) {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			refs = append(refs, ref{e.Name(), fi.ModTime()})
		}
	}
	slices.SortFunc(refs, func(a, b ref) int { return b.at.Compare(a.at) })
	var out []string
	for _, r := range refs[:min(n, len(refs))] {
		out = append(out, r.sha)
	}
	return out
}

// writeRef makes the loose ref name of repository dir point at sha, as git
// does: through name.lock, renamed into place.
func writeRef(dir, name, sha string) error {
	path := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write ref %s: %w", name, err)
	}
	lock := path + ".lock"
	if err := os.WriteFile(lock, []byte(sha+"\n"), 0o600); err != nil {
		return fmt.Errorf("write ref %s: %w", name, err)
	}
	if err := os.Rename(lock, path); err != nil {
		os.Remove(lock)
		return fmt.Errorf("write ref %s: %w", name, err)
	}
	return nil
}
