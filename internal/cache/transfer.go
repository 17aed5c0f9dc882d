package cache

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/objstore"
)

// Archive format of an entry in the bucket: a zstd stream of a tar (the
// agent's copy format) of the entry's directory, entry.json included.
// Its metadata: sha256 (hex, of the object's bytes), created (RFC 3339,
// nanoseconds), bytes and files (the entry's apparent size and count),
// key (base64url, unpadded; the name holds only its first bytes).

// errStalled is a transfer's context cause when no byte moved for
// IdleTimeout.
var errStalled = errors.New("stalled")

// transfer bounds one download or upload: TransferTimeout in all, and
// IdleTimeout without progress (progress reports some).
func (s *Store) transfer(ctx context.Context) (context.Context, func(), func()) {
	ctx, cancelT := context.WithTimeout(ctx, s.opts.TransferTimeout)
	ctx, cancel := context.WithCancelCause(ctx)
	idle := s.opts.IdleTimeout
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(idle / 10)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, last.Load())) > idle {
					cancel(errStalled)
					return
				}
			}
		}
	}()
	return ctx, func() { last.Store(time.Now().UnixNano()) }, func() { close(done); cancel(nil); cancelT() }
}

// transferErr says err in one line, naming a stall or the overall bound
// rather than "cancelled".
func (s *Store) transferErr(ctx context.Context, op, name string, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), errStalled):
		return fmt.Errorf("object store %s: %s: no byte moved for %s: given up", s.opts.Bucket, op, s.opts.IdleTimeout)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("object store %s: %s: not done in %s: given up", s.opts.Bucket, op, s.opts.TransferTimeout)
	}
	return brief(err)
}

// briefError is an *objstore.Error said without the object's name (a
// long run of hex digits that tells a reader nothing the line does not).
type briefError struct{ e *objstore.Error }

func (b briefError) Error() string {
	return fmt.Sprintf("object store %s: %s: %s", b.e.Store, b.e.Op, b.e.Reason)
}
func (b briefError) Unwrap() error { return b.e }

// brief shortens an *objstore.Error for the setup log; other errors stay.
func brief(err error) error {
	var oe *objstore.Error
	if errors.As(err, &oe) {
		return briefError{oe}
	}
	return err
}

// progressReader counts and hashes what it reads, and reports progress.
type progressReader struct {
	r        io.Reader
	h        hash.Hash
	n        int64
	progress func()
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		if p.h != nil {
			p.h.Write(b[:n])
		}
		p.n += int64(n)
		p.progress()
	}
	return n, err
}

// download fetches the bucket's name (repo's entry for key with paths),
// checks every byte against its SHA-256 and commits it to this disk. It
// returns the archive's size. A mismatch wraps ErrDamaged (and removes
// the object); a failed read is the store's error.
func (s *Store) download(ctx context.Context, repo string, paths []string, key, name string) (int64, error) {
	b := s.opts.Bucket
	ctx, progress, stop := s.transfer(ctx)
	defer stop()
	body, info, err := b.Get(ctx, name, 0)
	if err != nil {
		return 0, s.transferErr(ctx, "get", name, err)
	}
	defer body.Close()
	want := info.Meta["sha256"]
	st, err := s.Begin(repo, key, paths)
	if err != nil {
		return 0, err
	}
	defer st.Abort()
	pr := &progressReader{r: body, h: sha256.New(), progress: progress}
	xerr := unpack(ctx, pr, st.Dir)
	var oe *objstore.Error
	if errors.As(xerr, &oe) {
		return pr.n, s.transferErr(ctx, "get", name, oe)
	}
	if ctx.Err() != nil {
		return pr.n, s.transferErr(ctx, "get", name, xerr)
	}
	// Every byte goes through the hash, also what the unpacking did not
	// need (or could not read: then the sum says whether the bytes or
	// this disk were at fault).
	if _, err := io.Copy(io.Discard, pr); err != nil {
		return pr.n, s.transferErr(ctx, "get", name, err)
	}
	if got := hex.EncodeToString(pr.h.Sum(nil)); got != want || pr.n != info.Size {
		s.removeDamaged(name)
		return pr.n, fmt.Errorf("object store %s: cache %q: %w (%d bytes, want sha256 %.12s…, got %.12s…): removed from the store", b, key, ErrDamaged, pr.n, want, got)
	}
	if xerr != nil {
		return pr.n, fmt.Errorf("cache %q: unpack on this disk: %w", key, xerr)
	}
	if err := st.adopt(); err != nil {
		return pr.n, fmt.Errorf("cache %q from %s: %w", key, b, err)
	}
	if _, _, err := st.Commit(); err != nil && !errors.Is(err, ErrExists) {
		return pr.n, err
	}
	return pr.n, nil
}

func unpack(ctx context.Context, r io.Reader, dst string) error {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		return err
	}
	defer zr.Close()
	_, err = agent.ExtractTar(ctx, zr, agent.HostTree{}, dst)
	return err
}

// adopt reads the entry.json a download brought, checks that it is the
// stage's entry (repository, key, paths: never restore what the name
// does not say), keeps its creation time and removes it (Commit writes
// its own).
func (st *Stage) adopt() error {
	f := filepath.Join(st.Dir, "entry.json")
	raw, err := os.ReadFile(f)
	if err != nil {
		return fmt.Errorf("the archive has no entry.json: %w", err)
	}
	var e Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		return fmt.Errorf("the archive's entry.json: %w", err)
	}
	if e.Repo != st.repo || e.Key != st.key || !samePaths(e.Paths, st.paths) {
		return fmt.Errorf("the archive holds the entry of %q, key %q, paths %q: not this one", e.Repo, e.Key, e.Paths)
	}
	st.created = e.Created
	return os.Remove(f)
}

func (s *Store) removeDamaged(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.LookupTimeout)
	defer cancel()
	if err := s.opts.Bucket.Remove(ctx, name); err != nil {
		s.log.Warn("cache store: remove a damaged entry from the bucket", "name", name, "err", err)
	}
	_ = s.opts.Bucket.Remove(ctx, usedName(name))
}

// ErrShared is wrapped by Upload's error when the bucket has the entry
// already: another runner saved this key meanwhile.
var ErrShared = errors.New("another runner saved this key meanwhile")

// Upload puts e, an entry Commit returned, into the bucket unless it is
// there: archived into tmp/ (its SHA-256 and size measured), then written
// with PutIfAbsent, so two runners saving one key leave one whole object
// (the second's error wraps ErrShared). It returns the archive's size.
// Without a bucket it does nothing. Bounded like a download.
func (s *Store) Upload(ctx context.Context, e *Entry) (int64, error) {
	b := s.opts.Bucket
	if b == nil {
		return 0, nil
	}
	name := entryName(e.Repo, e.Paths, e.Key)
	sctx, cancel := context.WithTimeout(ctx, s.opts.LookupTimeout)
	_, err := b.Stat(sctx, name)
	cancel()
	if err == nil {
		return 0, fmt.Errorf("cache %q: %w", e.Key, ErrShared)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return 0, brief(err)
	}
	release, ok := s.pin(e.Dir)
	if !ok {
		return 0, fmt.Errorf("cache %q: evicted from this disk before its upload (see --cache-size)", e.Key)
	}
	f, sum, size, err := s.archive(ctx, e.Dir)
	release()
	if err != nil {
		return 0, fmt.Errorf("cache %q: archive for the store: %w", e.Key, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	meta := map[string]string{
		"sha256": sum, "created": e.Created.UTC().Format(time.RFC3339Nano),
		"bytes": strconv.FormatInt(e.Bytes, 10), "files": strconv.Itoa(e.Files),
		"key": base64.RawURLEncoding.EncodeToString([]byte(e.Key)),
	}
	tctx, progress, stop := s.transfer(ctx)
	defer stop()
	err = b.PutIfAbsent(tctx, name, &progressReader{r: f, progress: progress}, size, meta)
	if errors.Is(err, objstore.ErrExists) {
		return 0, fmt.Errorf("cache %q: %w", e.Key, ErrShared)
	}
	if err != nil {
		return 0, s.transferErr(tctx, "put", name, err)
	}
	return size, nil
}

// archive writes dir as an entry's archive to a file in tmp/, returning
// it (at offset 0), its SHA-256 (hex) and size.
func (s *Store) archive(ctx context.Context, dir string) (*os.File, string, int64, error) {
	f, err := os.CreateTemp(s.tmp(), "upload-*.tzst")
	if err != nil {
		return nil, "", 0, err
	}
	fail := func(err error) (*os.File, string, int64, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, "", 0, err
	}
	h := sha256.New()
	zw, err := zstd.NewWriter(io.MultiWriter(f, h), zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2))
	if err != nil {
		return fail(err)
	}
	if err := agent.WriteTar(ctx, zw, agent.HostTree{}, dir); err != nil {
		zw.Close()
		return fail(err)
	}
	if err := zw.Close(); err != nil {
		return fail(err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fail(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	return f, hex.EncodeToString(h.Sum(nil)), size, nil
}

// pin keeps the entry in dir from eviction until release; false when it
// is not in the index (evicted already).
func (s *Store) pin(dir string) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[dir] == nil {
		return nil, false
	}
	s.pins[dir]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pins[dir]--; s.pins[dir] <= 0 {
			delete(s.pins, dir)
		}
	}, true
}
