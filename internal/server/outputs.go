package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/outputs"
	"knotless.dev/knotless/internal/store"
)

// outputFiles keeps runs' outputs archives: DIR/outputs/<run>/outputs.tar
// once stored, DIR/outputs/<run>/<sha256>-<size>.part while it arrives.
// Uploads of one run are serialized. With an object store (objects.go),
// the archives of ended runs move there.
type outputFiles struct {
	dir string
	mu  [64]sync.Mutex
	obj objectsRef
}

// open opens run's archive, of size bytes, for reading: the local file
// or, once moved, the object. Errors: NotFound when it is in neither
// place (removed), the file's, the database's.
func (o *outputFiles) open(ctx context.Context, run, size int64) (io.ReadSeekCloser, error) {
	f, err := os.Open(o.archive(run))
	if err == nil {
		return f, nil
	}
	if !gone(err) {
		return nil, fmt.Errorf("open outputs of run %d: %w", run, err)
	}
	objs, moved, merr := o.obj.movedOutputs(ctx, run)
	if merr != nil {
		return nil, merr
	}
	if !moved {
		return nil, xerr(http.StatusNotFound, api.ErrNotFound, "the outputs of run %d are no longer stored", run)
	}
	r := objs.reader(ctx, outputsObject(run), size)
	if size > 0 {
		if err := r.openAt(0); err != nil { // the store answers before the status is written
			return nil, err
		}
	}
	return r, nil
}

func (o *outputFiles) runDir(run int64) string {
	return filepath.Join(o.dir, strconv.FormatInt(run, 10))
}

func (o *outputFiles) archive(run int64) string {
	return filepath.Join(o.runDir(run), "outputs.tar")
}

func (o *outputFiles) part(run int64, sum string, size int64) string {
	return filepath.Join(o.runDir(run), fmt.Sprintf("%s-%d.part", sum, size))
}

func (o *outputFiles) lock(run int64) *sync.Mutex {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d", run)
	return &o.mu[h.Sum32()%uint32(len(o.mu))]
}

// removeParts deletes the partial uploads of run but keep.
func (o *outputFiles) removeParts(run int64, keep string) {
	parts, _ := filepath.Glob(filepath.Join(o.runDir(run), "*.part"))
	for _, p := range parts {
		if p != keep {
			_ = os.Remove(p)
		}
	}
}

// dropParts deletes what is left of unfinished uploads of run.
func (o *outputFiles) dropParts(run int64) {
	mu := o.lock(run)
	mu.Lock()
	defer mu.Unlock()
	o.removeParts(run, "")
	_ = os.Remove(o.runDir(run)) // only when empty
}

// outputsTooLarge is the refusal of an archive past Config.MaxOutputsSize.
func (s *Server) outputsTooLarge(run, n int64) *api.Error {
	return xerr(http.StatusRequestEntityTooLarge, api.ErrOutputsTooLarge,
		"the outputs of run %d are %s, more than this server's limit of %s per run (knotless-server --max-outputs-size); "+
			"list fewer or smaller paths under outputs:, or ask the server's operator to raise the limit",
		run, size(n), size(s.cfg.MaxOutputsSize))
}

func (s *Server) uploadOutputs(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	ctx := r.Context()
	id, err := requiredInt(r, "run")
	if err != nil {
		return err
	}
	total, err := requiredInt(r, "size")
	if err != nil {
		return err
	}
	offset, err := intParam(r, "offset", -1)
	if err != nil {
		return err
	}
	if offset < 0 || offset > total {
		return badRequest("parameter offset is required and must be 0..size")
	}
	sum := r.URL.Query().Get("sha256")
	if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size || strings.ToLower(sum) != sum {
		return badRequest("parameter sha256 must be the archive's SHA-256 as 64 lowercase hex digits")
	}
	if _, err := s.heldRun(ctx, x, id); err != nil {
		return err
	}
	if total > s.cfg.MaxOutputsSize {
		return s.outputsTooLarge(id, total)
	}
	// The body is read before the run's lock: a slow sender holds no one up.
	data, release, err := readLogChunk(r, maxLogChunk)
	if err != nil {
		return err
	}
	defer release()
	mu := s.outputs.lock(id)
	mu.Lock()
	defer mu.Unlock()
	stored, err := s.store.RunOutputs(ctx, id)
	switch {
	case err == nil && stored.SHA256 == sum && stored.Size == total:
		return writeJSON(w, api.UploadOutputsOutput{Size: total, Stored: true})
	case err == nil:
		return xerr(http.StatusConflict, api.ErrConflict, "run %d stored other outputs already (sha256 %s)", id, stored.SHA256)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	if err := os.MkdirAll(s.outputs.runDir(id), 0o700); err != nil {
		return fmt.Errorf("create outputs directory of run %d: %w", id, err)
	}
	part := s.outputs.part(id, sum, total)
	if offset == 0 {
		s.outputs.removeParts(id, part) // an earlier, other archive
	}
	held, err := appendPart(part, offset, total, data)
	var gap *errGap
	if errors.As(err, &gap) {
		n := gap.size
		return &api.Error{Status: http.StatusConflict, Name: api.ErrOffsetGap, Size: &n,
			Message: fmt.Sprintf("offset %d is past the %d bytes of run %d's outputs held; resend from %d", offset, n, id, n)}
	}
	if err != nil {
		return err
	}
	if held < total {
		return writeJSON(w, api.UploadOutputsOutput{Size: held})
	}
	o, entries, err := s.verifyOutputs(id, part, sum, total)
	if err != nil {
		_ = os.Remove(part)
		return err
	}
	if err := os.Rename(part, s.outputs.archive(id)); err != nil {
		return fmt.Errorf("store outputs of run %d: %w", id, err)
	}
	if err := s.store.PutOutputs(ctx, o, entries); err != nil {
		return err
	}
	s.log.Info("run outputs stored", "run", id, "runner", x.Name, "bytes", total, "entries", o.Entries, "sha256", sum)
	s.notify(runKey(id))
	return writeJSON(w, api.UploadOutputsOutput{Size: total, Stored: true})
}

// appendPart writes data, which starts at byte offset of the upload, to
// the partial file at p: bytes it holds already are skipped. It returns
// how many bytes it holds after. An offset past them is *errGap; more
// bytes than total is an error.
func appendPart(p string, offset, total int64, data []byte) (int64, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("open partial outputs: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	held := fi.Size()
	if offset > held {
		return held, &errGap{size: held}
	}
	if offset+int64(len(data)) > total {
		return held, badRequest("the body ends at byte %d, past the archive's declared size %d", offset+int64(len(data)), total)
	}
	skip := held - offset
	if skip >= int64(len(data)) {
		return held, nil
	}
	n, err := f.Write(data[skip:])
	held += int64(n)
	if err != nil {
		return held, fmt.Errorf("write partial outputs: %w", err)
	}
	if held == total {
		if err := f.Sync(); err != nil {
			return held, fmt.Errorf("sync outputs: %w", err)
		}
	}
	return held, f.Close()
}

// verifyOutputs checks a complete upload against its declared SHA-256 and
// reads its entries. A mismatch or an unreadable archive is
// ErrOutputsCorrupt: the runner sends it again.
func (s *Server) verifyOutputs(run int64, p, sum string, total int64) (store.Outputs, []store.OutputEntry, error) {
	f, err := os.Open(p)
	if err != nil {
		return store.Outputs{}, nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return store.Outputs{}, nil, fmt.Errorf("read outputs of run %d: %w", run, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return store.Outputs{}, nil, xerr(http.StatusUnprocessableEntity, api.ErrOutputsCorrupt,
			"the outputs archive of run %d arrived with sha256 %s, not the declared %s; it was discarded: send it again from offset 0", run, got, sum)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return store.Outputs{}, nil, err
	}
	list, st, err := outputs.Scan(f)
	if err != nil {
		return store.Outputs{}, nil, xerr(http.StatusUnprocessableEntity, api.ErrOutputsCorrupt,
			"the outputs archive of run %d is not one this server can list: %v", run, err)
	}
	entries := make([]store.OutputEntry, len(list))
	for i, e := range list {
		entries[i] = store.OutputEntry{Path: e.Path, Kind: e.Kind, Size: e.Size, Mode: e.Mode, Target: e.Target}
	}
	return store.Outputs{RunID: run, Size: total, SHA256: sum, Entries: st.Entries, Bytes: st.Bytes, StoredAt: s.now()}, entries, nil
}

// apiOutputs converts a stored outputs record.
func apiOutputs(o store.Outputs) *api.RunOutputs {
	return &api.RunOutputs{Size: o.Size, SHA256: o.SHA256, Files: o.Entries, Bytes: o.Bytes, StoredAt: o.StoredAt}
}

// runOutputs returns the summary of run's outputs, nil when it has none.
func (s *Server) runOutputs(r *http.Request, run int64) (*api.RunOutputs, error) {
	o, err := s.store.RunOutputs(r.Context(), run)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return apiOutputs(o), nil
}

// defaultOutputsPage is listOutputs' page without a limit parameter.
const defaultOutputsPage = 1000

func (s *Server) listOutputs(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	id, err := requiredInt(r, "run")
	if err != nil {
		return err
	}
	limit, err := s.pageLimit(r, min(defaultOutputsPage, s.cfg.MaxListPage))
	if err != nil {
		return err
	}
	if _, err := s.visibleRun(ctx, a, id); err != nil {
		return err
	}
	o, err := s.store.RunOutputs(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return xerr(http.StatusNotFound, api.ErrNotFound, "run %d stored no outputs", id)
	}
	if err != nil {
		return err
	}
	rows, err := s.store.OutputEntries(ctx, id, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	out := apiOutputs(o)
	out.Entries = make([]api.OutputEntry, 0, len(rows))
	for _, e := range rows {
		out.Entries = append(out.Entries, api.OutputEntry{Path: e.Path, Kind: e.Kind, Size: e.Size, Mode: e.Mode, Target: e.Target})
	}
	if len(rows) == limit {
		out.Cursor = rows[len(rows)-1].Path
	}
	return writeJSON(w, out)
}

func (s *Server) getOutputs(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	id, err := requiredInt(r, "run")
	if err != nil {
		return err
	}
	if _, err := s.visibleRun(ctx, a, id); err != nil {
		return err
	}
	return s.serveOutputs(w, r, id)
}

// serveOutputs answers r with run id's outputs archive (Range requests
// served), with its SHA-256 in OutputsSHA256Header; NotFound when the
// run stored none.
func (s *Server) serveOutputs(w http.ResponseWriter, r *http.Request, id int64) error {
	o, err := s.store.RunOutputs(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return xerr(http.StatusNotFound, api.ErrNotFound, "run %d stored no outputs", id)
	}
	if err != nil {
		return err
	}
	f, err := s.outputs.open(r.Context(), id, o.Size)
	if err != nil {
		return s.storeUnavailable(err, "outputs", "run", id)
	}
	defer f.Close()
	if or, ok := f.(*objectReader); ok {
		defer func() {
			if err := or.Err(); err != nil && r.Context().Err() == nil {
				s.log.Warn("send outputs", "run", id, "err", err)
			}
		}()
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set(api.OutputsSHA256Header, o.SHA256)
	h.Set("ETag", `"`+o.SHA256+`"`)
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="run-%d-outputs.tar"`, id))
	http.ServeContent(w, r, "", o.StoredAt, f)
	return nil
}
