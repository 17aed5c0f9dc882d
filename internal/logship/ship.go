package logship

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"knotless.dev/knotless/internal/api"
)

// MaxChunk is the largest appendLog body the shipper sends, in bytes: the
// server's own limit. A log that is behind goes in few large requests, one
// that keeps up in small ones (whatever the spool holds). An answer 413
// (a proxy with a lower limit) halves the chunk, down to minChunk.
const MaxChunk = 8 << 20

const minChunk = 64 << 10

// Shipper delivers one run's spool to the server: log bytes by offset with
// Client.AppendLog, then the journal's step updates in order (each after
// the log bytes written before it), then Client.Complete once everything
// else is delivered; then it removes the spool. While the server is
// unreachable it keeps everything on disk and retries with backoff.
type Shipper struct {
	Client *api.RunnerClient
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
	chunk      int            // the largest chunk sent (0: MaxChunk)
	roundBytes int64          // log bytes the last round delivered
	released   map[int]int64  // by step: how much of its log was given back (releaseLog)
	noRelease  bool           // the spool's file system cannot give space back
	corrupt    int            // outputs uploads the server found corrupt
}

// MaxOutputsAttempts is how many times the shipper sends a run's outputs
// archive whole when the server finds it corrupt (its SHA-256 differs from
// the declared one) before it gives up and says so in the setup log.
const MaxOutputsAttempts = 5

// A round that delivered at least lingerMin log bytes is followed by a
// pause of linger before the next: the most a streaming log's bytes wait
// for their request.
const (
	linger    = 20 * time.Millisecond
	lingerMin = 256 << 10
)

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
			wait := api.RetryWait(failures, err, maxWait)
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
		if sh.roundBytes >= lingerMin {
			// A step is streaming: let its output gather for a moment,
			// so that it goes in fewer, larger requests (each costs the
			// runner and the server a signature, a lookup and a round
			// trip) instead of one per write. A journal entry (the step
			// ended) cuts the pause short.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-sh.Spool.Appended():
			case <-time.After(linger):
			}
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
	sh.roundBytes = 0
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
	if e.Outputs != nil {
		return false, sh.shipOutputs(ctx, *e.Outputs)
	}
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
	if sh.chunk == 0 {
		sh.chunk = MaxChunk
	}
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
			n := min(int64(sh.chunk), fi.Size()-off)
			size, err := sh.appendLog(ctx, step, off, n)
			var xe *api.Error
			switch {
			case errors.As(err, &xe) && xe.Status == http.StatusRequestEntityTooLarge && sh.chunk > minChunk:
				sh.chunk = max(sh.chunk/2, minChunk)
				sh.Log.Info("the server refuses chunks this large; sending smaller ones", "run", sh.Spool.Run(), "bytes", sh.chunk)
			case err == nil && size <= off:
				f.Close()
				return fmt.Errorf("append log to run %d step %d at %d: the server stored nothing (size %d)", sh.Spool.Run(), step, off, size)
			case err == nil:
				sh.roundBytes += size - off
				sh.cur.Logs[step] = size
				changed = true
				if size-sh.released[step] >= releaseUnit && !sh.noRelease {
					// Give back what the server holds: the spool then never
					// keeps a long log whole (on disk, in the page cache).
					// The cursor goes first, so that no later process
					// reads the released bytes to send them.
					if err := sh.Spool.saveCursor(sh.cur); err == nil {
						changed = false
						sh.release(step, size)
					}
				}
			case errors.As(err, &xe) && xe.Name == api.ErrOffsetGap && xe.Size != nil && *xe.Size < sh.released[step]:
				// The server lost bytes it had acknowledged, and the spool
				// gave them back: nothing can send them again.
				sh.Log.Error("the server lost log bytes it had acknowledged, which the runner no longer has; the rest of the step's log is not sent",
					"run", sh.Spool.Run(), "step", step, "server_bytes", *xe.Size, "released_bytes", sh.released[step])
				sh.cur.Logs[step] = fi.Size()
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

// release gives back step's log up to about acked bytes (Spool.releaseLog).
func (sh *Shipper) release(step int, acked int64) {
	if sh.released == nil {
		sh.released = map[int]int64{}
	}
	done, err := sh.Spool.releaseLog(step, sh.released[step], acked)
	if err != nil {
		sh.noRelease = true
		sh.Log.Debug("the spool cannot give back shipped log bytes; it keeps them until the run is delivered", "run", sh.Spool.Run(), "err", err)
		return
	}
	sh.released[step] = done
}

// appendLog sends n bytes of step's log from off, with their line times;
// a range with more line times than one request carries is cut short
// (the rest goes in the next).
func (sh *Shipper) appendLog(ctx context.Context, step int, off, n int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, sh.callTimeout())
	defer cancel()
	times, err := sh.Spool.LineTimes(step, off, off+n, api.MaxLineTimes+1, false)
	if err != nil {
		sh.Log.Debug("read line times; the bytes go without", "run", sh.Spool.Run(), "step", step, "err", err)
		times = nil
	}
	if len(times) > api.MaxLineTimes {
		n = times[api.MaxLineTimes].Offset - off
		times = times[:api.MaxLineTimes]
	}
	size, err := sh.Client.AppendLogFile(ctx, sh.Spool.Run(), step, off, sh.Spool.logPath(step), n, times)
	if err != nil {
		return 0, fmt.Errorf("append %d log bytes to run %d step %d at %d: %w", n, sh.Spool.Run(), step, off, err)
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

// shipOutputs uploads the run's outputs archive from the acknowledged
// offset on, in chunks of at most MaxChunk. It returns nil once the server
// stored it, or refused it for good (then a line in the setup log says
// why); an error (a dropped connection, a 5xx) makes the round retry with
// backoff, resuming where the server's bytes end.
func (sh *Shipper) shipOutputs(ctx context.Context, o OutputsRecord) error {
	run := sh.Spool.Run()
	path := filepath.Join(sh.Spool.dir, o.File)
	if sh.chunk == 0 {
		sh.chunk = MaxChunk
	}
	for {
		off := min(sh.cur.Outputs, o.Size)
		n := min(int64(sh.chunk), o.Size-off)
		cctx, cancel := context.WithTimeout(ctx, sh.callTimeout())
		res, err := sh.Client.UploadOutputsFile(cctx, run, off, o.Size, o.SHA256, path, n)
		cancel()
		var xe *api.Error
		errors.As(err, &xe)
		switch {
		case api.IsError(err, api.ErrSessionSuperseded):
			return err // another process owns the run now
		case err == nil && res.Stored:
			sh.cur.Outputs = o.Size
			_ = sh.Spool.saveCursor(sh.cur)
			sh.Log.Info("outputs stored by the server", "run", run, "bytes", o.Size, "sha256", o.SHA256)
			sh.note("outputs: stored by the server (%d bytes, sha256 %s)\n", o.Size, o.SHA256)
			return nil
		case err == nil && res.Size > off:
			sh.cur.Outputs = res.Size
			if err := sh.Spool.saveCursor(sh.cur); err != nil {
				return err
			}
		case err == nil:
			return fmt.Errorf("upload outputs of run %d at %d: the server stored nothing (size %d)", run, off, res.Size)
		case xe != nil && xe.Name == api.ErrOffsetGap && xe.Size != nil:
			sh.cur.Outputs = *xe.Size
		case xe != nil && xe.Name == api.ErrOutputsCorrupt:
			sh.corrupt++
			sh.cur.Outputs = 0
			_ = sh.Spool.saveCursor(sh.cur)
			if sh.corrupt >= MaxOutputsAttempts {
				sh.Log.Error("the server found the outputs corrupt every time; giving up", "run", run, "attempts", sh.corrupt, "err", err)
				sh.note("outputs: NOT stored: the server found the archive corrupt %d times (%v)\n", sh.corrupt, xe.Message)
				return nil
			}
			sh.Log.Warn("the server found the outputs corrupt; sending them again", "run", run, "attempt", sh.corrupt, "err", err)
			sh.note("outputs: the server received a corrupt copy (%s); sending it again\n", xe.Message)
		case xe != nil && xe.Status == http.StatusRequestEntityTooLarge && xe.Name != api.ErrOutputsTooLarge && sh.chunk > minChunk:
			sh.chunk = max(sh.chunk/2, minChunk)
			sh.Log.Info("the server refuses chunks this large; sending smaller ones", "run", run, "bytes", sh.chunk)
		case api.IsError(err, api.ErrNotFound) || notHeld(err):
			sh.Log.Warn("the server takes no outputs for the run", "run", run, "err", err)
			sh.note("outputs: NOT stored: %v\n", err)
			return nil
		case xe != nil && !api.Retryable(err):
			// Refused for good: too large, another archive stored, ...
			sh.Log.Warn("the server refused the run's outputs", "run", run, "err", err)
			msg := xe.Message
			if msg == "" {
				msg = xe.Error()
			}
			sh.note("outputs: NOT stored: %s\n", msg)
			return nil
		default:
			return fmt.Errorf("upload %d bytes of outputs of run %d at %d: %w", n, run, off, err)
		}
	}
}

// note appends a line of the shipper's own to the run's setup log, which
// is shipped before the result.
func (sh *Shipper) note(format string, args ...any) {
	if sh.logsClosed {
		return
	}
	w, err := sh.Spool.Log(0)
	if err != nil {
		sh.Log.Warn("write to the setup log", "run", sh.Spool.Run(), "err", err)
		return
	}
	defer w.Close()
	_, _ = fmt.Fprintf(w, format, args...)
}
