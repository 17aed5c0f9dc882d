package server_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// testArchive is a small outputs archive: dist/ with a file and a link,
// and coverage.out.
func testArchive(t *testing.T, big int) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		h.ModTime = time.Unix(1700000000, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "coverage.out", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6}, []byte("mode:\n"))
	add(&tar.Header{Name: "dist/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(&tar.Header{Name: "dist/app", Typeflag: tar.TypeSymlink, Linkname: "app.bin", Mode: 0o777}, nil)
	body := bytes.Repeat([]byte{0, 1, 2, 0xff}, big/4)
	add(&tar.Header{Name: "dist/app.bin", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))}, body)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// upload sends body as the bytes of run's outputs archive from offset, the
// archive being size bytes with sum.
func upload(c *api.Client, run, offset, size int64, sum string, body []byte) (api.UploadOutputsOutput, error) {
	var out api.UploadOutputsOutput
	resp, err := c.Do(context.Background(), http.MethodPost, api.MethodUploadOutputs, url.Values{
		"run": {itoa(run)}, "offset": {itoa(offset)}, "size": {itoa(size)}, "sha256": {sum},
	}, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

func getOutputs(c *api.Client, run int64, header http.Header) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodGet, c.URL(api.MethodGetOutputs, url.Values{"run": {itoa(run)}}), nil)
	for k, v := range header {
		req.Header[k] = v
	}
	if err := c.Auth(req, api.MethodGetOutputs); err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// An upload in chunks, repeated chunks and a gap behave like appendLog:
// nothing doubled, a gap refused with the size held; the last chunk stores
// the archive, its entries are listed (paged) and the owner downloads the
// same bytes (whole, or a range).
func TestUploadOutputs_ChunksResumeAndTheOwnerDownloadsTheSameBytes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	a := testArchive(t, 100_000)
	n, sum := int64(len(a)), sha(a)

	if out, err := upload(r.Client, id, 0, n, sum, a[:40_000]); err != nil || out.Size != 40_000 || out.Stored {
		t.Fatalf("first chunk: %+v, %v", out, err)
	}
	if out, err := upload(r.Client, id, 10_000, n, sum, a[10_000:50_000]); err != nil || out.Size != 50_000 {
		t.Fatalf("overlapping chunk: %+v, %v (want 50000 held)", out, err)
	}
	_, err := upload(r.Client, id, 60_000, n, sum, a[60_000:])
	var xe *api.Error
	if !api.IsError(err, api.ErrOffsetGap) || !errorsAs(err, &xe) || xe.Size == nil || *xe.Size != 50_000 {
		t.Fatalf("a gap: %v, want OffsetGap with size 50000", err)
	}
	var run api.Run
	if err := f.alice().Query(context.Background(), api.MethodGetRun, url.Values{"run": {itoa(id)}}, &run); err != nil || run.Outputs != nil {
		t.Fatalf("run before the last byte: outputs %+v, %v; want none", run.Outputs, err)
	}
	if out, err := upload(r.Client, id, 50_000, n, sum, a[50_000:]); err != nil || !out.Stored || out.Size != n {
		t.Fatalf("last chunk: %+v, %v", out, err)
	}
	if out, err := upload(r.Client, id, 0, n, sum, a); err != nil || !out.Stored {
		t.Fatalf("the whole archive again: %+v, %v; want stored (idempotent)", out, err)
	}
	if _, err := upload(r.Client, id, 0, 10, sha([]byte("other")), []byte("other")); !api.IsError(err, api.ErrConflict) {
		t.Errorf("another archive for the run: %v, want Conflict", err)
	}

	if err := f.alice().Query(context.Background(), api.MethodGetRun, url.Values{"run": {itoa(id)}}, &run); err != nil {
		t.Fatal(err)
	}
	if o := run.Outputs; o == nil || o.Size != n || o.SHA256 != sum || o.Files != 4 || o.Bytes != 100_006 {
		t.Fatalf("run's outputs %+v, want %d bytes, sha256 %s, 4 entries, 100006 bytes in files", o, n, sum)
	}
	var page api.RunOutputs
	if err := f.alice().Query(context.Background(), api.MethodListOutputs, url.Values{"run": {itoa(id)}, "limit": {"3"}}, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 3 || page.Entries[0].Path != "coverage.out" || page.Entries[1] != (api.OutputEntry{Path: "dist", Kind: api.OutputDir, Mode: 0o755}) ||
		page.Entries[2] != (api.OutputEntry{Path: "dist/app", Kind: api.OutputSymlink, Mode: 0o777, Target: "app.bin"}) || page.Cursor != "dist/app" {
		t.Fatalf("first page %+v", page)
	}
	cursor := page.Cursor
	page = api.RunOutputs{}
	if err := f.alice().Query(context.Background(), api.MethodListOutputs, url.Values{"run": {itoa(id)}, "cursor": {cursor}}, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 1 || page.Entries[0] != (api.OutputEntry{Path: "dist/app.bin", Kind: api.OutputFile, Size: 100_000, Mode: 0o755}) || page.Cursor != "" {
		t.Fatalf("second page %+v", page)
	}

	resp, got, err := getOutputs(f.alice(), id, nil)
	if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, a) || resp.Header.Get(api.OutputsSHA256Header) != sum {
		t.Fatalf("download: %v, status %d, %d bytes (want %d), sha header %q", err, resp.StatusCode, len(got), n, resp.Header.Get(api.OutputsSHA256Header))
	}
	resp, got, err = getOutputs(f.Admin(), id, http.Header{"Range": {"bytes=1000-1999"}})
	if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(got, a[1000:2000]) {
		t.Fatalf("ranged download by the admin: %v, status %d, %d bytes", err, resp.StatusCode, len(got))
	}
	if _, err := os.Stat(filepath.Join(f.DataDir, server.OutputsDir, itoa(id), "outputs.tar")); err != nil {
		t.Errorf("archive not under DATA/outputs/RUN: %v", err)
	}
}

// Only the repository's owner and admins read a run's outputs: not another
// account, not a run token (not even the run's own), not another runner;
// and only the runner holding the run uploads them.
func TestOutputs_OnlyOwnerAndAdminReadThemAndOnlyTheHoldingRunnerUploads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	a := testArchive(t, 1000)
	if out, err := upload(r.Client, c.Run.ID, 0, int64(len(a)), sha(a), a); err != nil || !out.Stored {
		t.Fatalf("upload: %+v, %v", out, err)
	}
	bob := f.CreateAccount(t, "bob")
	for name, cl := range map[string]*api.Client{
		"another account": f.Client(bob),
		"the run's token": withToken(f.URL, c.RunToken),
	} {
		resp, _, err := getOutputs(cl, c.Run.ID, nil)
		if err != nil || (resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusUnauthorized) {
			t.Errorf("%s downloads the outputs: %v, status %v; want 401 or 404", name, err, resp.StatusCode)
		}
		if err := cl.Query(context.Background(), api.MethodListOutputs, url.Values{"run": {itoa(c.Run.ID)}}, nil); err == nil {
			t.Errorf("%s lists the outputs", name)
		}
	}
	other := f.RegisterRunner(t, f.repo, "r2", nil, true)
	if _, err := upload(other.Client, c.Run.ID, 0, int64(len(a)), sha(a), a); !api.IsError(err, api.ErrForbidden) {
		t.Errorf("another runner uploads: %v, want Forbidden", err)
	}
	if _, err := upload(withToken(f.URL, f.token), c.Run.ID, 0, int64(len(a)), sha(a), a); err == nil {
		t.Errorf("an account token uploads outputs")
	}
}

// A complete upload whose bytes do not have the declared SHA-256 is
// discarded with OutputsCorrupt (nothing recorded, the partial file gone),
// and the same archive sent again from 0 is stored.
func TestUploadOutputs_CorruptArchiveIsDiscardedAndTheResendStored(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	a := testArchive(t, 10_000)
	bad := bytes.Clone(a)
	bad[len(bad)/2] ^= 0x40
	_, err := upload(r.Client, c.Run.ID, 0, int64(len(a)), sha(a), bad)
	var xe *api.Error
	if !api.IsError(err, api.ErrOutputsCorrupt) || !errorsAs(err, &xe) || xe.Status != http.StatusUnprocessableEntity || !strings.Contains(xe.Message, "send it again from offset 0") {
		t.Fatalf("a corrupt archive: %v, want 422 OutputsCorrupt saying to send it again", err)
	}
	if parts, _ := filepath.Glob(filepath.Join(f.DataDir, server.OutputsDir, itoa(c.Run.ID), "*")); len(parts) != 0 {
		t.Errorf("files kept of a corrupt upload: %v", parts)
	}
	// A body that is not a tar at all, with its true SHA-256.
	junk := bytes.Repeat([]byte("not a tar "), 300)
	if _, err := upload(r.Client, c.Run.ID, 0, int64(len(junk)), sha(junk), junk); !api.IsError(err, api.ErrOutputsCorrupt) {
		t.Errorf("not a tar: %v, want OutputsCorrupt", err)
	}
	if out, err := upload(r.Client, c.Run.ID, 0, int64(len(a)), sha(a), a); err != nil || !out.Stored {
		t.Fatalf("the resend: %+v, %v", out, err)
	}
}

// An archive past --max-outputs-size is refused before a byte is kept,
// with an error that names the flag and both sizes.
func TestUploadOutputs_OverTheLimitIsRefusedNamingTheFlag(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{MaxOutputsSize: 64 << 10})
	r, c := claimedRun(t, f)
	a := testArchive(t, 100_000)
	_, err := upload(r.Client, c.Run.ID, 0, int64(len(a)), sha(a), a[:1000])
	var xe *api.Error
	if !api.IsError(err, api.ErrOutputsTooLarge) || !errorsAs(err, &xe) || xe.Status != http.StatusRequestEntityTooLarge ||
		!strings.Contains(xe.Message, "more than this server's limit of 64 KiB per run (knotless-server --max-outputs-size)") {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.DataDir, server.OutputsDir, itoa(c.Run.ID))); !os.IsNotExist(err) {
		t.Errorf("the server made a directory for refused outputs (%v)", err)
	}
	small := testArchive(t, 1000)
	if out, err := upload(r.Client, c.Run.ID, 0, int64(len(small)), sha(small), small); err != nil || !out.Stored {
		t.Fatalf("an archive under the limit: %+v, %v", out, err)
	}
}

// Archives whose entries would leave the directory they are unpacked to,
// or name one path twice, are not stored.
func TestUploadOutputs_EntriesLeavingTheCheckoutAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	for _, name := range []string{"../escape", "/etc/passwd", "a/../../b", "dup"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		n := 1
		if name == "dup" {
			n = 2
		}
		for i := 0; i < n; i++ {
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte("x"))
		}
		tw.Close()
		b := buf.Bytes()
		if _, err := upload(r.Client, c.Run.ID, 0, int64(len(b)), sha(b), b); !api.IsError(err, api.ErrOutputsCorrupt) {
			t.Errorf("entry %q: %v, want OutputsCorrupt", name, err)
		}
	}
}

func errorsAs(err error, target **api.Error) bool { return errors.As(err, target) }
