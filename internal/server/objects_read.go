package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"knotless.dev/knotless/internal/api"

	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/store"
)

// Reading what the mover put in the object store (objects.go): the same
// answers as from the local files, whichever replica asks.

// lookupTimeout bounds a reader's database lookup of a moved log.
const lookupTimeout = 30 * time.Second

// readTimeout bounds one read of an object (a log streamed to a slow
// client included).
const readTimeout = time.Hour

// movedLog returns the record of run's step log when it was moved to the
// object store; ok false when there is no object store or the log is not
// in it.
func (r *objectsRef) movedLog(run int64, step int) (o *objects, l store.MovedLog, ok bool, err error) {
	o = r.get()
	if o == nil {
		return nil, l, false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	l, err = o.db.MovedLog(ctx, run, step)
	if errors.Is(err, store.ErrNotFound) {
		return o, l, false, nil
	}
	if err != nil {
		return o, l, false, err
	}
	return o, l, true, nil
}

// movedOutputs reports whether run's outputs archive was moved to the
// object store.
func (r *objectsRef) movedOutputs(ctx context.Context, run int64) (*objects, bool, error) {
	o := r.get()
	if o == nil {
		return nil, false, nil
	}
	m, err := o.db.MovedRun(ctx, run)
	if errors.Is(err, store.ErrNotFound) {
		return o, false, nil
	}
	if err != nil {
		return o, false, err
	}
	return o, m.Outputs, nil
}

// openObject opens n bytes of object name from offset for reading once
// the store answered (its headers arrived); reading past them, or the
// object ending before, fails. Errors: the store's (objstore.ErrNotExist
// when the object is gone).
func (o *objects) openObject(name string, offset, n int64) (io.ReadCloser, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	rc, _, err := o.bucket.Get(ctx, name, offset)
	if err != nil {
		cancel()
		return nil, err
	}
	return &objectRange{rc: rc, cancel: cancel, name: name, end: offset + n, left: n}, nil
}

// objectRange is an open object read up to a known end.
type objectRange struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	name   string
	end    int64
	left   int64
}

func (r *objectRange) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.left)]
	n, err := r.rc.Read(p)
	r.left -= int64(n)
	if errors.Is(err, io.EOF) && r.left > 0 {
		err = fmt.Errorf("object %s ends before byte %d: %w", r.name, r.end, io.ErrUnexpectedEOF)
	}
	return n, err
}

func (r *objectRange) Close() error {
	err := r.rc.Close()
	r.cancel()
	return err
}

// errStoreUnavailable names the error of a read of bytes moved to an
// object store that failed (503).
const errStoreUnavailable = api.ErrObjectStoreUnavailable

// storeUnavailable turns a failed read of the object store into a 503
// with the store's one-line reason, and logs it; other errors pass
// unchanged (a missing object is not the store's outage).
func (s *Server) storeUnavailable(err error, what string, args ...any) error {
	var oe *objstore.Error
	if !errors.As(err, &oe) || errors.Is(err, objstore.ErrNotExist) {
		return err
	}
	s.log.Warn("read "+what+" from the object store", append(args, "err", err)...)
	return xerr(http.StatusServiceUnavailable, errStoreUnavailable, "%s: try again later", oe.Error())
}

// objectReader reads one object of known size as an io.ReadSeeker and
// io.ReaderAt (http.ServeContent's ranges; api.ReadLineTimes' binary
// search): a read opens the object at its offset, and reads that follow
// on go on from the same response.
type objectReader struct {
	ctx  context.Context
	o    *objects
	name string
	size int64
	pos  int64         // Read's position
	rc   io.ReadCloser // open at rcAt, or nil
	rcAt int64
	err  error // the first error a read met
}

func (o *objects) reader(ctx context.Context, name string, size int64) *objectReader {
	return &objectReader{ctx: ctx, o: o, name: name, size: size}
}

func (r *objectReader) Read(p []byte) (int, error) {
	n, err := r.ReadAt(p, r.pos)
	r.pos += int64(n)
	return n, err
}

// ReadAt reads from the open response when it is at off, else opens one
// there (for a binary search, one request per probe).
func (r *objectReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.size-off)]
	if err := r.openAt(off); err != nil {
		r.err = err
		return 0, err
	}
	n, err := io.ReadFull(r.rc, p)
	r.rcAt += int64(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("object %s ends at byte %d, before its recorded %d: %w", r.name, r.rcAt, r.size, objstore.ErrNotExist)
	}
	if err != nil {
		r.err = err
	}
	return n, err
}

// openAt makes the open response start at off, opening one there when it
// does not (the store answered when it returns).
func (r *objectReader) openAt(off int64) error {
	if r.rc != nil && r.rcAt == off {
		return nil
	}
	r.Close()
	rc, _, err := r.o.bucket.Get(r.ctx, r.name, off)
	if err != nil {
		return err
	}
	r.rc, r.rcAt = rc, off
	return nil
}

// Err returns the first error a read met, if any.
func (r *objectReader) Err() error { return r.err }

func (r *objectReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.size
	}
	if offset < 0 {
		return r.pos, errors.New("seek before the start")
	}
	r.pos = offset
	return offset, nil
}

// Close closes the open response, if any.
func (r *objectReader) Close() error {
	if r.rc != nil {
		r.rc.Close()
		r.rc = nil
	}
	return nil
}
