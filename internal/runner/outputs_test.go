package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/logship"
)

// outputsProxy stands between the runner and the server: every request
// passes unchanged but uploadOutputs requests, whose bodies fault may
// change (forward is what the server gets) or cut (the runner's connection
// is then dropped after forward reached the server). It counts uploads.
type outputsProxy struct {
	*httptest.Server
	mu      sync.Mutex
	uploads int
}

func newOutputsProxy(t *testing.T, target string, fault func(n int, body []byte) (forward []byte, cut bool)) *outputsProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // long polls cut when the runner stops
	p := &outputsProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/"+api.MethodUploadOutputs) {
			rp.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		p.mu.Lock()
		n := p.uploads
		p.uploads++
		p.mu.Unlock()
		forward, cut := fault(n, body)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(forward)), int64(len(forward))
		if !cut {
			rp.ServeHTTP(w, r)
			return
		}
		// The server gets the first bytes; the runner never hears back.
		rp.ServeHTTP(httptest.NewRecorder(), r)
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *outputsProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.uploads
}

const outputsWorkflow = wfHead + `outputs: [dist/]
steps:
  - run: |
      mkdir -p dist/sub
      head -c 3000000 /dev/urandom > dist/sub/big.bin
      echo small > dist/small.txt
`

// runWithProxy runs outputsWorkflow with the runner talking to the server
// through a proxy with fault, and returns the final run and its setup log.
func runWithProxy(t *testing.T, fault func(n int, body []byte) ([]byte, bool)) (*world, *outputsProxy, api.Run, string) {
	w := newWorld(t, true)
	p := newOutputsProxy(t, w.srv.URL, fault)
	w.startRunner(func(c *Config) { c.State.Server = p.URL })
	run := w.push(map[string]string{".knotless/workflows/ci.yml": outputsWorkflow})
	final := w.waitFinal(run.ID, 60*time.Second)
	setup := string(w.stepLog(run.ID, 0))
	if final.State != api.StateSucceeded || final.Outputs == nil {
		t.Fatalf("run %s/%s with outputs %+v; want succeeded with outputs; setup log:\n%s", final.State, final.Reason, final.Outputs, setup)
	}
	if !strings.Contains(setup, "sha256 "+final.Outputs.SHA256+", packed in") {
		t.Errorf("the server stored sha256 %s, not what the runner packed:\n%s", final.Outputs.SHA256, setup)
	}
	resp, err := w.srv.Admin().Do(context.Background(), http.MethodGet, api.MethodGetOutputs, url.Values{"run": {strconv.FormatInt(run.ID, 10)}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	if n, err := io.Copy(h, resp.Body); err != nil || n != final.Outputs.Size || hex.EncodeToString(h.Sum(nil)) != final.Outputs.SHA256 {
		t.Fatalf("download: %d bytes, %v; sha256 %x, want %s", n, err, h.Sum(nil), final.Outputs.SHA256)
	}
	w.assertCleanedUp(run.ID)
	return w, p, final, setup
}

// A corrupted upload (one byte flipped on the way) is refused by the
// server's SHA-256 check and sent again whole; the run's result comes
// after the outputs are stored, and the setup log tells the story.
func TestIntegration_CorruptOutputsUploadIsRefusedAndSentAgain(t *testing.T) {
	_, p, _, setup := runWithProxy(t, func(n int, body []byte) ([]byte, bool) {
		if n == 0 && len(body) > 100 {
			body = bytes.Clone(body)
			body[len(body)/2] ^= 0x01
		}
		return body, false
	})
	if p.count() < 2 {
		t.Errorf("%d uploads, want the corrupt one and a resend", p.count())
	}
	for _, want := range []string{"outputs: the server received a corrupt copy (the outputs archive of run", "sending it again", "outputs: stored by the server"} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup log lacks %q:\n%s", want, setup)
		}
	}
}

// An upload cut halfway (the server got the first half, the runner's
// connection dropped) is retried with backoff and resumes: the server
// keeps what it had and takes the rest.
func TestIntegration_OutputsUploadCutMidwayIsRetriedAndStoredWhole(t *testing.T) {
	_, p, final, _ := runWithProxy(t, func(n int, body []byte) ([]byte, bool) {
		if n == 0 {
			return body[:len(body)/2], true
		}
		return body, false
	})
	if p.count() < 2 || final.Outputs.Files != 4 {
		t.Errorf("%d uploads, %d entries stored; want a retry and 4 entries (dist, dist/small.txt, dist/sub, dist/sub/big.bin)", p.count(), final.Outputs.Files)
	}
}

// The server is down when the run ends: the outputs wait in the spool with
// the result, the runner process stops, and the next one on the same work
// directory stores them before it reports the result.
func TestIntegration_OutputsPackedWhileTheServerIsDownAreStoredByTheNextRunnerProcess(t *testing.T) {
	w := newWorld(t, true)
	stop := w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `outputs: [report.txt]
steps:
  - run: |
      echo started
      while [ ! -e "$KNOTLESS_WORKSPACE/../go-on" ]; do sleep 0.05; done
      echo "the report" > report.txt
`})
	waitFor(t, 30*time.Second, "step output", func() bool { return string(w.stepLog(run.ID, 1)) == "started\n" })
	w.srv.Stop()
	if err := os.WriteFile(filepath.Join(w.work, "runs", strconv.FormatInt(run.ID, 10), "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(w.work, "spool", strconv.FormatInt(run.ID, 10))
	waitFor(t, 30*time.Second, "the outputs and the result in the spool", func() bool {
		data, _ := os.ReadFile(filepath.Join(spool, logship.JournalFile))
		return bytes.Contains(data, []byte(`"outputs"`)) && bytes.Contains(data, []byte(`"complete"`))
	})
	stop()
	w.srv.Restart()
	w.startRunner(nil)
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded || final.Outputs == nil || final.Outputs.Files != 1 || final.Outputs.Bytes != 11 {
		t.Fatalf("run %s/%s with outputs %+v; want succeeded with report.txt (11 bytes)\n%s", final.State, final.Reason, final.Outputs, w.stepLog(run.ID, 0))
	}
	if setup := string(w.stepLog(run.ID, 0)); !strings.Contains(setup, "outputs: stored by the server") {
		t.Errorf("setup log does not say the outputs were stored:\n%s", setup)
	}
	w.assertCleanedUp(run.ID)
}
