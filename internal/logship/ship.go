package logship

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"knotless.dev/knotless/internal/api"
)

// MaxChunk is the largest appendLog body the shipper sends, in bytes.
const MaxChunk = 1 << 20

// Shipper delivers one run's spool to the server: log bytes by offset with
// Client.AppendLog, then the journal's step updates in order (each after
// the log bytes written before it), then Client.Complete once everything
// else is delivered; then it removes the spool. While the server is
// unreachable it keeps everything on disk and retries with backoff.
type Shipper struct {
	Client *Client
	Spool  *Spool
	Log    *slog.Logger
	// MaxBackoff caps the wait between retries; 0 means 15 s.
	MaxBackoff time.Duration
	// CallTimeout bounds one request; 0 means 60 s.
	CallTimeout time.Duration

	cur        shipCursor
	journalOff int64
	seen       int            // journal entries read so far
	pending    []JournalEntry // read, not yet acknowledged
	logsClosed bool           // the server refuses further log bytes (run final)
	buf        []byte         // one chunk
}

// errShipped ends a Shipper's work: the spool is delivered (or the server
// has no use for the rest).
var errShipped = errors.New("spool delivered")

// Run ships until the spool is delivered and removed (nil) or ctx ends
// (ctx's error; the spool stays on disk for a later process), or the
// server answers SessionSuperseded (that error; the spool stays).
func (sh *Shipper) Run(ctx context.Context) error {
	if sh.Log == nil {
		sh.Log = slog.Default()
	}
	log := sh.Log.With("run", sh.Spool.Run())
	cur, err := sh.Spool.loadCursor()
	if err != nil {
		return err
	}
	sh.cur = cur
	maxWait := sh.MaxBackoff
	if maxWait == 0 {
		maxWait = 15 * time.Second
	}
	failures := 0
	// A slow tick covers a writer that went away without a last poke.
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		err := sh.round(ctx)
		if errors.Is(err, errShipped) {
			if err := sh.Spool.Remove(); err != nil {
				log.Warn("remove delivered spool", "err", err)
			}
			log.Debug("spool delivered")
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if api.IsError(err, api.ErrSessionSuperseded) {
				return err // another process owns the run now; the spool stays
			}
			wait := api.Backoff(failures, maxWait)
			failures++
			level := slog.LevelWarn
			if api.Retryable(err) && failures > 1 && failures%10 != 0 {
				level = slog.LevelDebug // one line per outage, then every tenth retry
			}
			log.Log(ctx, level, "shipping failed, will retry", "err", err, "retry", failures, "wait", wait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		if failures > 0 {
			log.Info("shipping resumed", "after_retries", failures)
			failures = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sh.Spool.Changed():
		case <-tick.C:
		}
	}
}

// round delivers what the spool holds now. It returns errShipped when the
// run's result was acknowledged.
func (sh *Shipper) round(ctx context.Context) error {
	entries, off, err := sh.Spool.Entries(sh.journalOff)
	if err != nil {
		return err
	}
	sh.journalOff = off
	for _, e := range entries {
		sh.seen++
		if sh.seen > sh.cur.Entries {
			sh.pending = append(sh.pending, e)
		}
	}
	// Every entry read above was written after the log bytes it follows, so
	// shipping the files' current sizes first keeps logs before updates.
	if err := sh.shipLogs(ctx); err != nil {
		return err
	}
	for len(sh.pending) > 0 {
		e := sh.pending[0]
		done, err := sh.send(ctx, e)
		if err != nil {
			return err
		}
		sh.pending = sh.pending[1:]
		sh.cur.Entries++
		if err := sh.Spool.saveCursor(sh.cur); err != nil {
			return err
		}
		if done {
			return errShipped
		}
	}
	return nil
}

func (sh *Shipper) send(ctx context.Context, e JournalEntry) (done bool, err error) {
	log := sh.Log.With("run", sh.Spool.Run())
	ctx, cancel := context.WithTimeout(ctx, sh.callTimeout())
	defer cancel()
	switch {
	case e.Step != nil:
		err := sh.Client.UpdateStep(ctx, *e.Step)
		switch {
		case err == nil:
			return false, nil
		case api.IsError(err, api.ErrRunFinished):
			log.Debug("step update refused: the run is final on the server", "step", e.Step.Step)
			return false, nil
		case api.IsError(err, api.ErrNotFound):
			log.Warn("the server no longer knows the run; dropping its spool")
			return true, nil
		case notHeld(err):
			log.Warn("the server takes nothing more for the run from this runner (another identity claimed it); dropping its spool", "err", err)
			return true, nil
		}
		return false, fmt.Errorf("update step %d of run %d: %w", e.Step.Step, e.Step.Run, err)
	case e.Complete != nil:
		if !sh.logsClosed {
			// complete goes only after every log byte.
			if err := sh.shipLogs(ctx); err != nil {
				return false, err
			}
		}
		err := sh.Client.Complete(ctx, *e.Complete)
		switch {
		case err == nil:
			log.Info("result delivered", "state", e.Complete.State, "reason", e.Complete.Reason)
			return true, nil
		case api.IsError(err, api.ErrRunFinished):
			log.Warn("the server had ended the run already; its result stands", "local_state", e.Complete.State, "local_reason", e.Complete.Reason)
			return true, nil
		case api.IsError(err, api.ErrNotFound):
			log.Warn("the server no longer knows the run; dropping its spool")
			return true, nil
		case notHeld(err):
			log.Warn("the server takes no result for the run from this runner (another identity claimed it); dropping its spool",
				"local_state", e.Complete.State, "local_reason", e.Complete.Reason, "err", err)
			return true, nil
		}
		return false, fmt.Errorf("complete run %d: %w", e.Complete.Run, err)
	}
	return false, nil // an empty entry: nothing to say
}

func (sh *Shipper) callTimeout() time.Duration {
	if sh.CallTimeout > 0 {
		return sh.CallTimeout
	}
	return 60 * time.Second
}

// shipLogs sends every step's bytes past the acknowledged offset, up to the
// file's size now, in chunks of at most MaxChunk.
func (sh *Shipper) shipLogs(ctx context.Context) error {
	if sh.logsClosed {
		return nil
	}
	steps, err := sh.Spool.Steps()
	if err != nil {
		return err
	}
	changed := false
	defer func() {
		if changed {
			_ = sh.Spool.saveCursor(sh.cur) // behind is harmless; the next save catches up
		}
	}()
	if sh.buf == nil {
		sh.buf = make([]byte, MaxChunk)
	}
	buf := sh.buf
	for _, step := range steps {
		f, err := os.Open(sh.Spool.logPath(step))
		if err != nil {
			return fmt.Errorf("read log of run %d step %d: %w", sh.Spool.Run(), step, err)
		}
		for {
			fi, err := f.Stat()
			if err != nil {
				f.Close()
				return fmt.Errorf("read log of run %d step %d: %w", sh.Spool.Run(), step, err)
			}
			off := sh.cur.Logs[step]
			if off >= fi.Size() {
				break
			}
			n := min(int64(MaxChunk), fi.Size()-off)
			if _, err := f.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
				f.Close()
				return fmt.Errorf("read log of run %d step %d: %w", sh.Spool.Run(), step, err)
			}
			size, err := sh.appendLog(ctx, step, off, buf[:n])
			var xe *api.Error
			switch {
			case err == nil && size <= off:
				f.Close()
				return fmt.Errorf("append log to run %d step %d at %d: the server stored nothing (size %d)", sh.Spool.Run(), step, off, size)
			case err == nil:
				sh.cur.Logs[step] = size
				changed = true
			case errors.As(err, &xe) && xe.Name == api.ErrOffsetGap && xe.Size != nil:
				// The server holds less than we thought (or more): resume
				// at its size.
				sh.cur.Logs[step] = *xe.Size
				changed = true
			case api.IsError(err, api.ErrRunFinished) || api.IsError(err, api.ErrNotFound) || notHeld(err):
				sh.Log.Warn("the server takes no more log bytes for the run", "run", sh.Spool.Run(), "step", step, "undelivered_bytes", fi.Size()-off, "err", err)
				sh.logsClosed = true
				f.Close()
				return nil
			default:
				f.Close()
				return err
			}
		}
		f.Close()
	}
	return nil
}

func (sh *Shipper) appendLog(ctx context.Context, step int, off int64, body []byte) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, sh.callTimeout())
	defer cancel()
	size, err := sh.Client.AppendLog(ctx, sh.Spool.Run(), step, off, body)
	if err != nil {
		return 0, fmt.Errorf("append %d log bytes to run %d step %d at %d: %w", len(body), sh.Spool.Run(), step, off, err)
	}
	return size, nil
}

// notHeld reports whether the server refused a delivery because this
// runner does not hold the run (403 Forbidden): it was claimed by another
// identity, e.g. this runner's own before it was removed and logged in
// anew. No later attempt can change that.
func notHeld(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Status == http.StatusForbidden && e.Name == api.ErrForbidden
}
