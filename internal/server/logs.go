package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// logFiles keeps step logs as files: DIR/logs/<run>/<step>.log, and their
// line times (api.LineTime records) as <step>.times beside. A log's size
// is its file's size; writes to one log (and to its times) are serialized,
// within a process by a mutex and across the replicas sharing DIR by an
// flock(2) of the log file. With an object store (objects.go), the logs
// of ended runs move there: each reader below looks for the local file
// first and, when it is gone, for the move's record.
type logFiles struct {
	dir string
	mu  [64]sync.Mutex
	obj objectsRef
}

// errGap: an append would leave a hole; size is what the log holds.
type errGap struct{ size int64 }

func (e *errGap) Error() string { return fmt.Sprintf("offset past the log's size %d", e.size) }

func (l *logFiles) path(run int64, step int) string {
	return filepath.Join(l.dir, strconv.FormatInt(run, 10), strconv.Itoa(step)+".log")
}

// stripe is the index in mu and writes of the log of run's step.
func (l *logFiles) stripe(run int64, step int) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", run, step)
	return int(h.Sum32() % uint32(len(l.mu)))
}

// size returns the log's size in bytes (0 when it does not exist), the
// local file's or, once moved, the recorded one. It opens the file rather
// than stat its path: on a shared file system (NFS, several replicas) an
// open revalidates the attributes another replica's appends changed
// (close-to-open consistency), a stat may answer from a cache for seconds.
func (l *logFiles) size(run int64, step int) (int64, error) {
	f, err := os.Open(l.path(run, step))
	if gone(err) {
		_, m, _, err := l.obj.movedLog(run, step)
		return m.Size, err
	}
	if err != nil {
		return 0, fmt.Errorf("open log of run %d step %d: %w", run, step, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("stat log of run %d step %d: %w", run, step, err)
	}
	return fi.Size(), nil
}

// append writes data, which starts at byte offset of the log: bytes the log
// already holds ([offset, size)) are skipped, never written twice. An
// offset past the size fails with *errGap. It returns the size before and
// after the append. times are the line times of data (offsets ascending):
// those of the bytes written are kept (a failure to is logged by the
// caller's next read, never an error of the append).
func (l *logFiles) append(run int64, step int, offset int64, data []byte, times ...api.LineTime) (before, after int64, err error) {
	a, err := l.openAppend(run, step, times)
	if err != nil {
		return 0, 0, err
	}
	before, after, err = a.write(offset, data)
	if cerr := a.close(); err == nil {
		err = cerr
	}
	return before, after, err
}

// logAppend is one request's append to a log, in one or more writes
// through one open file (and one of its times file): on a shared file
// system (NFS) each open and close is a round trip to the file server, and
// a close waits for the written bytes to reach it.
type logAppend struct {
	l      *logFiles
	run    int64
	step   int
	stripe int // logFiles.stripe
	f      *os.File
	tf     *os.File       // the times file, opened at the first time kept
	times  []api.LineTime // the request's line times not yet passed
	buf    []byte         // line time records being written
}

// openAppend opens the log of run's step for writing, creating it; times
// are the line times of what the append will write (offsets ascending).
func (l *logFiles) openAppend(run int64, step int, times []api.LineTime) (*logAppend, error) {
	p := l.path(run, step)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("create log directory of run %d: %w", run, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log of run %d step %d: %w", run, step, err)
	}
	return &logAppend{l: l, run: run, step: step, stripe: l.stripe(run, step), f: f, times: times}, nil
}

// write stores data, which starts at byte offset of the log, as
// logFiles.append does, with the line times of the bytes it writes, all
// under the log's locks (the process's mutex, then an exclusive flock of
// the log file, which another server replica sharing the data directory
// also takes): a log's bytes and its times file grow in the same order
// whichever requests interleave, in one replica or in two.
//
// The log's size comes from a stat of the file under the flock: another
// replica may have written since this append's last piece. (On NFS the
// flock's release sends the piece's bytes, so the stat does not wait for
// them.) The bytes go at their offset (pwrite), not at the file's end.
func (a *logAppend) write(offset int64, data []byte) (before, after int64, err error) {
	mu := &a.l.mu[a.stripe]
	mu.Lock()
	defer mu.Unlock()
	if err := unix.Flock(int(a.f.Fd()), unix.LOCK_EX); err != nil {
		return 0, 0, fmt.Errorf("lock log of run %d step %d: %w", a.run, a.step, err)
	}
	defer unix.Flock(int(a.f.Fd()), unix.LOCK_UN)
	fi, err := a.f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("stat log of run %d step %d: %w", a.run, a.step, err)
	}
	if unlinked(fi) {
		// The run ended and its log moved to the object store while this
		// append waited: what it wrote would be lost.
		return 0, 0, xerr(http.StatusConflict, api.ErrRunFinished,
			"run %d ended and its step %d log was moved to the object store; its result stands", a.run, a.step)
	}
	size := fi.Size()
	if offset > size {
		return size, size, &errGap{size: size}
	}
	skip := size - offset
	if skip >= int64(len(data)) {
		return size, size, nil
	}
	n, err := a.f.WriteAt(data[skip:], size)
	if n > 0 {
		a.writeTimes(size, size+int64(n))
	}
	if err != nil {
		return size, size + int64(n), fmt.Errorf("write log of run %d step %d: %w", a.run, a.step, err)
	}
	dropBehind(a.f, size, size+int64(n))
	return size, size + int64(n), nil
}

// writeTimes appends the line times of bytes [from, to), just written, to
// the times file (the caller holds the log's lock). Best effort: times are
// a help to read a log.
func (a *logAppend) writeTimes(from, to int64) {
	a.buf = a.buf[:0]
	for len(a.times) > 0 && a.times[0].Offset < to {
		if a.times[0].Offset >= from {
			a.buf = api.AppendLineTime(a.buf, a.times[0])
		}
		a.times = a.times[1:]
	}
	if len(a.buf) == 0 {
		return
	}
	if a.tf == nil {
		f, err := os.OpenFile(a.l.timesPath(a.run, a.step), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return
		}
		if fi, err := f.Stat(); err == nil && fi.Size()%api.LineTimeSize != 0 {
			_ = f.Truncate(fi.Size() - fi.Size()%api.LineTimeSize) // a torn record
		}
		a.tf = f
	}
	_, _ = a.tf.Write(a.buf)
}

// close closes the log and its times file; its error is the log's close's
// (where a shared file system reports a write that failed).
func (a *logAppend) close() error {
	if a.tf != nil {
		_ = a.tf.Close()
	}
	if err := a.f.Close(); err != nil {
		return fmt.Errorf("close log of run %d step %d: %w", a.run, a.step, err)
	}
	return nil
}

func (l *logFiles) timesPath(run int64, step int) string {
	return filepath.Join(l.dir, strconv.FormatInt(run, 10), strconv.Itoa(step)+".times")
}

// lineTimes returns the line times of the log with offsets in [from, to),
// at most max (0: all), and with before, the last one below from first.
// None when the log has none. Once moved, they are read from the object
// store (a request per probe of the binary search).
func (l *logFiles) lineTimes(run int64, step int, from, to int64, max int, before bool) ([]api.LineTime, error) {
	ts, err := l.readLineTimes(run, step, from, to, max, before)
	if err != nil {
		return nil, fmt.Errorf("read line times of run %d step %d: %w", run, step, err)
	}
	return ts, nil
}

func (l *logFiles) readLineTimes(run int64, step int, from, to int64, max int, before bool) ([]api.LineTime, error) {
	f, err := os.Open(l.timesPath(run, step))
	var r io.ReaderAt = f
	var size int64
	switch {
	case gone(err):
		o, m, ok, err := l.obj.movedLog(run, step)
		if err != nil || !ok || m.TimesSize == 0 {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
		defer cancel()
		or := o.reader(ctx, timesObject(run, step), m.TimesSize)
		defer or.Close()
		r, size = or, m.TimesSize
	case err != nil:
		return nil, err
	default:
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		size = fi.Size()
	}
	ts, err := api.ReadLineTimes(r, size, from, to, max, before)
	if errors.Is(err, io.EOF) {
		err = nil // a record torn as it was read: what came before it stands
	}
	return ts, err
}

// open returns the log for reading; os.ErrNotExist when nothing was written.
func (l *logFiles) open(run int64, step int) (*os.File, error) {
	return os.Open(l.path(run, step))
}

// copyRange writes bytes [offset, end) of the log to w, from the local
// file or, once moved, from the object store.
func (l *logFiles) copyRange(w io.Writer, run int64, step int, offset, end int64) error {
	if end <= offset {
		return nil
	}
	rc, err := l.openRange(run, step, offset, end)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// openRange opens bytes [offset, end) of the log for reading: the local
// file's or, once moved, the object's, after the store answered. Errors:
// the file's (os.ErrNotExist when nothing was written), the database's,
// the store's (*objstore.Error).
func (l *logFiles) openRange(run int64, step int, offset, end int64) (io.ReadCloser, error) {
	f, err := l.open(run, step)
	if gone(err) {
		o, _, ok, merr := l.obj.movedLog(run, step)
		if merr != nil {
			return nil, merr
		}
		if ok {
			return o.openObject(logObject(run, step), offset, end-offset)
		}
	}
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, offset, end-offset), f}, nil
}

// sendLog answers bytes [offset, size) of the log (getLog's answer). The
// bytes are opened before the status is written: a store that fails is a
// 503 with its reason, never a 200 cut short.
func (s *Server) sendLog(w http.ResponseWriter, run int64, step int, offset, size int64, done bool) error {
	n := max(size-offset, 0)
	var rc io.ReadCloser
	if n > 0 {
		var err error
		if rc, err = s.logs.openRange(run, step, offset, size); err != nil {
			return s.storeUnavailable(err, "log", "run", run, "step", step)
		}
		defer rc.Close()
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set(api.LogSizeHeader, strconv.FormatInt(size, 10))
	h.Set(api.LogDoneHeader, strconv.FormatBool(done))
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	if rc == nil {
		return nil
	}
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Warn("send log", "run", run, "step", step, "err", err)
	}
	return nil
}

// chunkBuffers recycles the buffers appendLog bodies are read into: a
// runner streaming a long log sends one chunk after the other, and a fresh
// buffer each time would be cleared and collected each time.
var chunkBuffers bufferPool

// bufferPool holds buffers in power-of-two size classes from 64 KiB up.
type bufferPool struct{ classes [16]sync.Pool }

type pooledBuffer struct {
	b     []byte // the requested length of the buffer
	class int
}

const minBufferClass = 16 // 64 KiB

func (p *bufferPool) get(n int) *pooledBuffer {
	c := 0
	for 1<<(minBufferClass+c) < n {
		c++
	}
	if c >= len(p.classes) {
		return &pooledBuffer{b: make([]byte, n), class: -1}
	}
	if b, ok := p.classes[c].Get().(*pooledBuffer); ok {
		b.b = b.b[:n]
		return b
	}
	return &pooledBuffer{b: make([]byte, n, 1<<(minBufferClass+c)), class: c}
}

func (p *bufferPool) put(b *pooledBuffer) {
	if b.class >= 0 {
		p.classes[b.class].Put(b)
	}
}

// The XRPC handlers of step logs: appendLog (the runner writes, by
// offset, exactly once) and getLog (people read and follow).

func (s *Server) appendLog(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	ctx := r.Context()
	id, err := requiredInt(r, "run")
	if err != nil {
		return err
	}
	step, err := intParam(r, "step", -1)
	if err != nil {
		return err
	}
	offset, err := intParam(r, "offset", -1)
	if err != nil {
		return err
	}
	if step < 0 || offset < 0 {
		return badRequest("parameters step and offset are required and must be >= 0")
	}
	if err := s.checkStep(step); err != nil {
		return err
	}
	run, err := s.heldRun(ctx, x, id)
	if err != nil {
		return err
	}
	if api.IsFinal(run.State) {
		if _, _, moved, err := s.logs.obj.movedLog(id, int(step)); err != nil || moved {
			if err != nil {
				return err
			}
			return xerr(http.StatusConflict, api.ErrRunFinished,
				"run %d ended and its step %d log was moved to the object store; its result stands", id, step)
		}
		// Retention removed the run's logs (a lost runner surfacing past
		// --retention-grace): an append would make a file nobody reads.
		if at, err := s.expiredAt(ctx, id); err != nil || at != nil {
			if err != nil {
				return err
			}
			return xerr(http.StatusConflict, api.ErrRunFinished,
				"run %d ended and retention removed its logs on %s; its result stands", id, expiredDate(*at))
		}
	}
	// Line times are a help to read the log: malformed ones are dropped,
	// never a reason to refuse the log's bytes.
	times, terr := api.ParseLineTimes(r.URL.Query().Get(api.LogTimesParam))
	if terr != nil {
		s.log.Warn("append log: line times dropped", "run", id, "step", step, "runner", x.Name, "err", terr)
	}
	before, after, err := s.appendBody(r, id, int(step), offset, times)
	var gap *errGap
	if errors.As(err, &gap) {
		size := gap.size
		return &api.Error{Status: http.StatusConflict, Name: api.ErrOffsetGap, Size: &size,
			Message: fmt.Sprintf("offset %d is past the %d bytes stored for run %d step %d; resend from %d",
				offset, size, id, step, size)}
	}
	// What was written counts even when the body broke off after it: the
	// step's first bytes make the step known, whichever request brought them
	// (and the request's context may be gone with its connection).
	if before == 0 && after > 0 {
		name := ""
		if step == api.SetupStep {
			name = "setup"
		}
		if err := s.store.EnsureStep(context.WithoutCancel(ctx), id, int(step), name, time.Now()); err != nil {
			return err
		}
	}
	if after > before {
		s.metrics.logBytes.Add(float64(after - before))
		s.notify(runKey(id))
	}
	if err != nil {
		return err
	}
	return writeJSON(w, api.AppendLogOutput{Size: after})
}

// appendPiece is how much of an appendLog body is read before it is
// written: small enough to stay in the CPU's cache between the socket's
// copy and the file's (a whole 8 MiB chunk did not, and writing it cost
// the server several times what reading it did), large enough that a
// lock and a write per piece cost little.
const appendPiece = 256 << 10

// appendBody appends the body of an appendLog request to the log of run's
// step, which it starts at byte offset, piece by piece (appendPiece bytes
// each, through one open of the file) as it arrives, never holding the
// log's lock while it waits for the network; the line times of the bytes
// written go to the times file with them. It returns the log's size
// before the body and after its last piece (written or skipped as held
// already). A body cut short leaves its whole pieces written (and their
// line times): the runner resends from its own offset and append skips
// what the log holds. Errors: *errGap (offset past the log's size, nothing
// read), 413 (Content-Length over maxLogChunk; a body without one is read
// whole first, up to that limit), 400 (the body broke off), or the file's.
func (s *Server) appendBody(r *http.Request, run int64, step int, offset int64, times []api.LineTime) (before, after int64, err error) {
	if r.ContentLength < 0 {
		data, err := readLimited(r, maxLogChunk)
		if err != nil {
			return 0, 0, err
		}
		return s.logs.append(run, step, offset, data, times...)
	}
	if r.ContentLength > maxLogChunk {
		return 0, 0, bodyTooLarge(maxLogChunk)
	}
	a, err := s.logs.openAppend(run, step, times)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := a.close(); err == nil {
			err = cerr
		}
	}()
	// An offset past the log's end is refused before the body is read.
	if before, after, err = a.write(offset, nil); err != nil {
		return before, after, err
	}
	buf := chunkBuffers.get(int(min(r.ContentLength, appendPiece)))
	defer chunkBuffers.put(buf)
	for off, end := offset, offset+r.ContentLength; off < end; {
		n := int(min(int64(len(buf.b)), end-off))
		if _, err := io.ReadFull(r.Body, buf.b[:n]); err != nil {
			return before, after, bodyError(err)
		}
		if _, after, err = a.write(off, buf.b[:n]); err != nil {
			return before, after, err
		}
		off += int64(n)
	}
	return before, after, nil
}

// readLogChunk reads an appendLog body of at most limit bytes into a
// buffer of chunkBuffers; release gives it back once the bytes are stored.
// A body of known length is read in one go, without growing a buffer.
func readLogChunk(r *http.Request, limit int64) (data []byte, release func(), err error) {
	if r.ContentLength < 0 {
		data, err = readLimited(r, limit)
		return data, func() {}, err
	}
	if r.ContentLength > limit {
		return nil, nil, bodyTooLarge(limit)
	}
	buf := chunkBuffers.get(int(r.ContentLength))
	if _, err := io.ReadFull(r.Body, buf.b); err != nil {
		chunkBuffers.put(buf)
		return nil, nil, bodyError(err)
	}
	return buf.b, func() { chunkBuffers.put(buf) }, nil
}

func bodyTooLarge(limit int64) error {
	return xerr(http.StatusRequestEntityTooLarge, api.ErrInvalidRequest,
		"body exceeds the limit of %d bytes per request; send smaller chunks", limit)
}

// readLimited reads a request body of at most limit bytes.
func readLimited(r *http.Request, limit int64) ([]byte, error) {
	tooLarge := bodyTooLarge(limit)
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, bodyError(err)
	}
	if int64(len(data)) > limit {
		return nil, tooLarge
	}
	return data, nil
}

func (s *Server) getLog(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	id, err := requiredInt(r, "run")
	if err != nil {
		return err
	}
	step, err := intParam(r, "step", api.SetupStep)
	if err != nil {
		return err
	}
	offset, err := intParam(r, "offset", 0)
	if err != nil {
		return err
	}
	wait, err := intParam(r, "wait", 0)
	if err != nil {
		return err
	}
	if step < 0 || offset < 0 || wait < 0 || wait > 60 {
		return badRequest("step and offset must be >= 0, wait 0..60 seconds")
	}
	if err := s.checkStep(step); err != nil {
		return err
	}
	if _, err := s.visibleRun(ctx, a, id); err != nil {
		return err
	}
	deadline := time.NewTimer(time.Duration(wait) * time.Second)
	defer deadline.Stop()
	for {
		changed := s.hub.wait(runKey(id)) // subscribe before looking
		run, err := s.store.Run(ctx, id)
		if err != nil {
			return err
		}
		steps, err := s.store.Steps(ctx, id)
		if err != nil {
			return err
		}
		done := stepDone(run, steps, int(step))
		size, err := s.logs.size(id, int(step))
		if err != nil {
			return err
		}
		if size > offset || done || wait == 0 {
			return s.sendLog(w, id, int(step), offset, size, done)
		}
		s.followers.Add(1)
		var gone bool
		select {
		case <-changed:
		case <-deadline.C:
			wait = 0
		case <-s.closing:
			wait = 0
		case <-ctx.Done():
			gone = true
		}
		s.followers.Add(-1)
		if gone {
			return ctx.Err()
		}
	}
}
