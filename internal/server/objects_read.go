package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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

// copyObject writes n bytes of object name from offset to w. Errors: the
// store's (objstore.ErrNotExist when the object is gone), short object,
// w's.
func (o *objects) copyObject(w io.Writer, name string, offset, n int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	rc, _, err := o.bucket.Get(ctx, name, offset)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.CopyN(w, rc, n); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("object %s ends before byte %d", name, offset+n)
		}
		return err
	}
	return nil
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
	if r.rc == nil || r.rcAt != off {
		r.Close()
		rc, _, err := r.o.bucket.Get(r.ctx, r.name, off)
		if err != nil {
			return 0, err
		}
		r.rc, r.rcAt = rc, off
	}
	n, err := io.ReadFull(r.rc, p)
	r.rcAt += int64(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("object %s ends at byte %d, before its recorded %d: %w", r.name, r.rcAt, r.size, objstore.ErrNotExist)
	}
	return n, err
}

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
