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
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/dummy"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testwait"
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
	p.Server = httptest.NewServer(servertest.FullDuplex(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	})))
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
	testwait.For(t, 30*time.Second, "step output", func() bool { return string(w.stepLog(run.ID, 1)) == "started\n" })
	w.srv.Stop()
	if err := os.WriteFile(filepath.Join(w.work, "workspaces", "alice", "app", "ci", "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(w.work, "spool", strconv.FormatInt(run.ID, 10))
	testwait.For(t, 30*time.Second, "the outputs and the result in the spool", func() bool {
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

// Execute packs the outputs into the spool after the steps, also when a
// step failed, and journals them before the result; a missing path is a
// line in the setup log, not a failure.
func TestExecute_FailedRunPacksItsOutputsIntoTheSpoolBeforeTheResult(t *testing.T) {
	sp, err := logship.CreateSpool(t.TempDir(), 42)
	if err != nil {
		t.Fatal(err)
	}
	job := testJob(t, "on: {push: {}}\noutputs: [dist/, nope.txt]\nsteps:\n  - run: |\n      mkdir -p dist && echo built > dist/app\n      exit 4\n")
	job.OutputsDir = filepath.Join(t.TempDir(), "outputs")
	res := Execute(context.Background(), job, testShell(t), SpoolReporter{Spool: sp})
	if res.State != api.StateFailed || res.ExitCode == nil || *res.ExitCode != 4 {
		t.Fatalf("result %+v, want failed with exit code 4", res)
	}
	entries, _, err := sp.Entries(0)
	if err != nil {
		t.Fatal(err)
	}
	outAt, completeAt := -1, -1
	var rec *logship.OutputsRecord
	for i, e := range entries {
		if e.Outputs != nil {
			outAt, rec = i, e.Outputs
		}
		if e.Complete != nil {
			completeAt = i
		}
	}
	if outAt < 0 || completeAt != len(entries)-1 || outAt > completeAt || rec.Entries != 2 {
		t.Fatalf("journal: outputs at %d (%+v), result at %d of %d; want the outputs (2 entries) before the result", outAt, rec, completeAt, len(entries))
	}
	b, err := os.ReadFile(filepath.Join(sp.Dir(), rec.File))
	sum := sha256.Sum256(b)
	if err != nil || int64(len(b)) != rec.Size || hex.EncodeToString(sum[:]) != rec.SHA256 {
		t.Fatalf("the spool's archive: %d bytes, %v; journal says %d bytes, sha256 %s", len(b), err, rec.Size, rec.SHA256)
	}
	setup := readLog(t, sp, 0)
	for _, want := range []string{"outputs: nope.txt does not exist: not collected", "outputs: collected dist/: 6 bytes in 2 entries", "sha256 " + rec.SHA256} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup log lacks %q:\n%s", want, setup)
		}
	}
	if _, err := os.Stat(job.OutputsDir); !os.IsNotExist(err) {
		t.Errorf("the copied outputs stay on the host after packing (%v)", err)
	}
}

// A process that takes a run over whose outputs the earlier process packed
// already does not collect them again (the spool holds them); one whose
// predecessor did not get to it does.
func TestExecute_TakeoverCollectsOutputsOnlyWhenTheEarlierProcessDidNot(t *testing.T) {
	for _, packed := range []bool{true, false} {
		world := dummy.NewWorld()
		ex := dummy.New(world)
		sess, err := ex.Prepare(context.Background(), executor.Spec{ID: "run-42", Workspace: t.TempDir(), Log: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		h := sess.Handle()
		sp, err := logship.CreateSpool(t.TempDir(), 42)
		if err != nil {
			t.Fatal(err)
		}
		job := testJob(t, "on: {push: {}}\noutputs: [dist/]\nsteps:\n  - run: echo done\n")
		job.OutputsDir = filepath.Join(t.TempDir(), "outputs")
		job.Resume = &Resume{Session: &h, Recovered: sess, Started: time.Now(), By: "test", OutputsCollected: packed,
			Steps: map[int]api.UpdateStepInput{
				0: {Run: 42, Step: 0, State: api.StepSucceeded},
				1: {Run: 42, Step: 1, State: api.StepSucceeded},
			}}
		if res := Execute(context.Background(), job, ex, SpoolReporter{Spool: sp}); res.State != api.StateSucceeded {
			t.Fatalf("packed=%v: result %+v", packed, res)
		}
		setup := readLog(t, sp, 0)
		said := strings.Contains(setup, "outputs: packed by the earlier runner process already")
		collected := strings.Contains(setup, "outputs: dist: not collected: the executor copied nothing")
		if said != packed || collected == packed {
			t.Errorf("packed=%v: setup log:\n%s", packed, setup)
		}
	}
}
