package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/server/servertest"
)

// TestServer_UploadPackGetsAllOfARequestItAnswersBeforeItEnds pins the
// server's half of CI's failure of
// TestMirrors_GitFetchFallbackTrustsTheCAOfSSLCertFile: upload-pack
// writes "ACK" for the first common commit among the haves while it still
// reads the rest of them, and Go's HTTP/1 server read away and closed the
// rest of the request body when that answer's header went out, so
// upload-pack never saw "done" and the fetch got no pack. Here the common
// commit comes first and 150 KB of other haves after it (more than the
// pipe to upload-pack holds), as a mirror with many refs sends.
func TestServer_UploadPackGetsAllOfARequestItAnswersBeforeItEnds(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	_, c := claimedRun(t, f)
	var body bytes.Buffer
	body.WriteString(pkt("want "+c.Run.SHA+" side-band-64k ofs-delta no-progress\n") + "0000")
	body.WriteString(pkt("have " + c.Run.SHA + "\n"))
	id := make([]byte, 20)
	for range 3000 {
		rand.Read(id)
		body.WriteString(pkt("have " + hex.EncodeToString(id) + "\n"))
	}
	body.WriteString(pkt("done\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL+"/alice/app.git/git-upload-pack", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("x:"+c.RunToken)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v (so far %q)", err, answer)
	}
	// ACK of the common commit, then the (empty) pack on band 1, then the
	// flush that ends the answer.
	if !strings.Contains(string(answer), "ACK "+c.Run.SHA) || !bytes.Contains(answer, []byte("\x01PACK")) || !bytes.HasSuffix(answer, []byte("0000")) {
		t.Fatalf("upload-pack's answer to want, 3001 haves and done: %q; want an ACK, a pack and the flush after it", answer)
	}
}
