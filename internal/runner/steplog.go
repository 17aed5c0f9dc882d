package runner

// This file is the runner's side of a step's log, in one place: every
// byte a step writes goes, in order,
//
//	executor Session.Exec's out  → stepOut.Write (this file)
//	  → logmask.Writer (secrets and their encodings replaced)
//	  → capWriter (the per-step cap, TruncatedMarker, LostMarker)
//	  → countWriter (the log's size, for checkpoints; the runner's marker
//	    lines of a restart or a reconnect, at the next line's start)
//	  → Reporter.Log's LogFile: the run's spool file (logship.Spool.Log,
//	    which records when each line began: line times), or the console /
//	    a test's memory
//
// and after each write stepOut records a checkpoint (logship.Checkpoint:
// raw output offset, log size, the masker's held bytes) through the
// Journal, so that a restarted runner resumes the step's log exactly where
// this one stopped (stepLog with a checkpoint). The setup log (step 0) is
// the same chain without checkpoints (setupLog). From the spool,
// logship.Shipper sends the bytes to the server (api.RunnerClient's
// AppendLogFile); docs/architecture.md maps every hop.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/logmask"
	"knotless.dev/knotless/internal/logship"
)

// DefaultLogLimit is the most log bytes kept per step (64 MiB).
const DefaultLogLimit = 64 << 20

// TruncatedMarker is the line a step's log ends with once it reached limit
// bytes; the step keeps running and the rest of its output is discarded.
func TruncatedMarker(limit int64) string {
	return fmt.Sprintf("[knotless: log truncated at %d bytes; the step keeps running]\n", limit)
}

// LostMarker is the line a log holds where the runner could not write n
// bytes of it (the spool's disk was full, say): the log is not whole, and
// the step that wrote it does not end succeeded.
func LostMarker(n int64, err error) string {
	return fmt.Sprintf("[knotless: %d bytes of this log were lost here: the runner could not write them: %v]\n", n, err)
}

// RestartMarker is the line a step's log holds where its output goes on
// after the runner process that followed it stopped and another, by, took
// the run over at t: a gap in the lines' times is the restart. The
// output after it is what the new process read from the step's last
// checkpoint on.
func RestartMarker(by string, t time.Time) string {
	return fmt.Sprintf("[knotless: the runner restarted: %s took this step over at %s; its output goes on below]\n",
		by, t.UTC().Format(time.RFC3339))
}

// ReconnectMarker is the line a step's log holds where its output resumed
// at t on a new connection to the step's environment after the last one
// dropped (err): the step ran on meanwhile, and nothing was lost.
func ReconnectMarker(err error, t time.Time) string {
	why := "the connection to the step agent dropped"
	if err != nil {
		why += " (" + firstLine(err.Error()) + ")"
	}
	return fmt.Sprintf("[knotless: %s; its output resumed at %s, nothing lost]\n", why, t.UTC().Format(time.RFC3339))
}

// capWriter passes at most limit bytes to out, then the truncation marker
// (on a line of its own), then nothing. It never fails a write, so a full
// log or a broken spool cannot stop a step. A downstream error is not
// silent: the bytes are counted as lost, later writes first try to put
// LostMarker where they were lost (the disk may have room again once the
// shipper gave back what it delivered) and go on from there; lost and err
// tell the step's end what happened.
type capWriter struct {
	out       io.Writer
	limit     int64
	n         int64 // bytes passed to out
	last      byte  // last byte passed to out
	truncated bool
	err       error // the first write error
	lost      int64 // bytes lost in all
	pending   int64 // bytes lost since the last marker written
	marked    int   // markers written
	lastErr   error // the error of the bytes pending
}

func newCapWriter(out io.Writer, limit int64) *capWriter {
	if limit <= 0 {
		limit = DefaultLogLimit
	}
	return &capWriter{out: out, limit: limit}
}

// resumeCapWriter continues a log that holds n bytes already, the last of
// them last: past the limit, it holds the marker and nothing more comes.
func resumeCapWriter(out io.Writer, limit, n int64, last byte) *capWriter {
	c := newCapWriter(out, limit)
	c.n, c.last = min(n, c.limit), last
	c.truncated = n > c.limit
	return c
}

// pass writes p to out, counting what it could not write as lost.
func (c *capWriter) pass(p []byte) bool {
	n, err := c.out.Write(p)
	c.n += int64(n)
	if n > 0 {
		c.last = p[n-1]
	}
	if err != nil {
		c.loss(int64(len(p)-n), err)
		return false
	}
	return true
}

func (c *capWriter) loss(n int64, err error) {
	if c.err == nil {
		c.err = err
	}
	c.lastErr = err
	c.lost += n
	c.pending += n
}

// mark writes the marker of the pending lost bytes, if any; it reports
// whether the log may go on (nothing pending any more).
func (c *capWriter) mark() bool {
	if c.pending == 0 {
		return true
	}
	marker := LostMarker(c.pending, c.lastErr)
	if c.n > 0 && c.last != '\n' {
		marker = "\n" + marker
	}
	n, err := io.WriteString(c.out, marker)
	c.n += int64(n)
	if n > 0 {
		c.last = marker[n-1]
	}
	if err != nil {
		return false // tried again with the next write, or at the end
	}
	c.pending = 0
	c.marked++
	return true
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.truncated {
		return len(p), nil
	}
	keep := p
	if rest := c.limit - c.n; int64(len(p)) > rest {
		keep = p[:max(rest, 0)]
	}
	if !c.mark() {
		c.pending += int64(len(keep))
		c.lost += int64(len(keep))
		return len(p), nil
	}
	if len(keep) > 0 && !c.pass(keep) {
		return len(p), nil
	}
	if len(keep) < len(p) {
		c.truncated = true
		marker := TruncatedMarker(c.limit)
		if c.n > 0 && c.last != '\n' {
			marker = "\n" + marker
		}
		if _, err := io.WriteString(c.out, marker); err != nil && c.err == nil {
			c.err = err
		}
	}
	return len(p), nil
}

// finish tries, for up to wait, to write the marker of bytes lost last (the
// shipper may be giving space back meanwhile). It reports whether the log
// holds a marker for every byte lost.
// When the wait is over, or at once when free is set and gives up space
// kept back for this (the spool's reserve), it tries once more.
func (c *capWriter) finish(wait time.Duration, free func() bool) bool {
	deadline := time.Now().Add(wait)
	for !c.mark() {
		if errors.Is(c.lastErr, syscall.EPIPE) {
			return false // the output's reader has gone for good (exec | head)
		}
		if free != nil && free() {
			continue
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// lostMarkWait is how long a step's end waits for room to write the
// marker of the log bytes it lost (the shipper gives back the space of
// what it delivered).
var lostMarkWait = 10 * time.Second

// stepLog opens step idx's log through the masker and the cap, resuming it
// at the checkpoint at when the step was running under an earlier runner
// process. The returned writer records checkpoints as it goes.
func (e *execution) stepLog(idx int, at *logship.Checkpoint) (*stepOut, error) {
	o := &stepOut{e: e, idx: idx}
	var w logship.LogFile
	var err error
	if at != nil && e.journal != nil {
		var last byte
		if w, last, err = e.journal.ResumeLog(idx, at.Log); err != nil {
			return nil, err
		}
		o.file = &countWriter{w: w, n: at.Log, last: last}
		o.cw = resumeCapWriter(o.file, e.job.LogLimit, at.Log, last)
		o.m = logmask.NewResumed(o.cw, e.secrets, at.Hidden)
		o.raw = at.Raw
		by := e.past.by
		// From the first byte (no checkpoint: the predecessor's spool was
		// rebuilt from the server's record, or it died before its first
		// one), the output is made again byte for byte and only what lies
		// past what the server holds is sent: a marker here would shift
		// it, and the server's log would repeat its start.
		if at.Log > 0 {
			o.mark(RestartMarker(by, time.Now()))
		}
	} else {
		if w, err = e.rep.Log(idx); err != nil {
			return nil, err
		}
		o.file = &countWriter{w: w}
		o.cw = newCapWriter(o.file, e.job.LogLimit)
		o.m = logmask.New(o.cw, e.secrets)
	}
	o.w = w
	if e.journal != nil {
		if o.cp, err = e.journal.Checkpoints(idx); err != nil {
			e.log.Warn("could not record checkpoints: a restarted runner would resume this step's log from its start", "step", idx, "err", err)
		}
	}
	return o, nil
}

// stepOut is a step's log: what Exec writes (the step's raw output) and the
// runner's own notes go through the masker and the cap to the reporter.
// After each write of output it records a checkpoint: how many raw output
// bytes the log holds, masked, and its size.
type stepOut struct {
	e    *execution
	idx  int
	m    *logmask.Writer
	cw   *capWriter
	file *countWriter
	w    logship.LogFile
	cp   *logship.CheckpointWriter

	raw    int64 // raw output offset of the masker's first byte of output
	notes  int64 // bytes of notes the masker took before the output began
	output bool  // the step's output has begun
}

func (o *stepOut) Write(p []byte) (int, error) {
	n, err := o.m.Write(p)
	if o.output && o.cp != nil {
		if dec, hidden, ok := o.m.Checkpoint(); ok && dec >= o.notes {
			if cerr := o.cp.Save(logship.Checkpoint{Raw: o.raw + dec - o.notes, Log: o.file.n, Hidden: hidden}); cerr != nil {
				o.e.log.Warn("record a checkpoint", "step", o.idx, "err", cerr)
				_ = o.cp.Close()
				o.cp = nil
			}
		}
	}
	return n, err
}

// started marks where the step's own output begins: what was written
// before (notes such as a missing secret) is not part of it.
func (o *stepOut) started() {
	if o.output {
		return
	}
	if err := o.m.Flush(); err != nil {
		o.e.log.Warn("flush step log", "step", o.idx, "err", err)
	}
	o.notes, _, _ = o.m.Checkpoint()
	o.output = true
}

// note writes a line of the runner's own after the step's output, on a
// line of its own: after a newline where the output ended without one.
func (o *stepOut) note(s string) {
	o.output = false
	if err := o.m.Flush(); err == nil && o.file.n > 0 && o.file.last != '\n' {
		s = "\n" + s
	}
	_, _ = io.WriteString(o.m, s)
}

// Resumed implements agent.Resumer: a marker line where the output goes on
// after a dropped connection.
func (o *stepOut) Resumed(_ int64, err error) {
	o.e.log.Info("step output resumed on a new connection", "step", o.idx, "after", err)
	o.mark(ReconnectMarker(err, time.Now()))
}

// mark puts a marker line of the runner's own into the log below the
// masker (so that it never splits a secret the masker is matching), at
// the next line's start (so that it never splits a line of the step's).
func (o *stepOut) mark(line string) {
	o.file.mark(logmask.String(line, o.e.secrets))
}

// close flushes the masker and closes the reporter's writer.
func (o *stepOut) close() error {
	err := o.m.Close()
	o.file.flushMark()
	if o.cw.lost > 0 {
		marked := o.cw.finish(lostMarkWait, o.w.FreeReserve)
		o.e.log.Error("step log lost bytes", "step", o.idx, "lost_bytes", o.cw.lost, "err", o.cw.err, "marked_in_log", marked)
	}
	if o.cp != nil {
		_ = o.cp.Close()
	}
	return errors.Join(err, o.w.Close())
}

// abandon closes the log as it is, leaving the masker's held bytes for the
// next runner process (it resumes at the last checkpoint).
func (o *stepOut) abandon() {
	if o.cp != nil {
		_ = o.cp.Close()
	}
	_ = o.w.Close()
}

// countWriter counts the bytes written through it (n: its file's size),
// keeps the last, and puts a marker line (mark) at the next line's start.
type countWriter struct {
	w       io.Writer
	n       int64
	last    byte
	pending string // a marker line waiting for the next line's start
}

// Write writes p, with a pending marker line where p's first line begins
// (before p when the log is at a line's start). It returns how many bytes
// of p were written.
func (c *countWriter) Write(p []byte) (int, error) {
	if c.pending == "" || len(p) == 0 {
		return c.write(p)
	}
	cut := 0
	if c.n > 0 && c.last != '\n' {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			return c.write(p)
		}
		cut = i + 1
	}
	n, err := c.write(p[:cut])
	if err != nil {
		return n, err
	}
	marker := c.pending
	c.pending = ""
	if _, err := c.write([]byte(marker)); err != nil {
		return n, err
	}
	m, err := c.write(p[cut:])
	return n + m, err
}

func (c *countWriter) write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if n > 0 {
		c.last = p[n-1]
	}
	return n, err
}

// mark makes line (ending in a newline) the log's next line of its own.
func (c *countWriter) mark(line string) { c.pending += line }

// flushMark writes a marker still waiting when the log ends: after the
// log's last line, ended by a newline where the step gave it none.
func (c *countWriter) flushMark() {
	if c.pending == "" {
		return
	}
	line := c.pending
	c.pending = ""
	if c.n > 0 && c.last != '\n' {
		line = "\n" + line
	}
	_, _ = c.write([]byte(line))
}

// setupLog is the run's setup log (step 0), masked and capped like a step's.
// Every printf is flushed through the masker at once.
type setupLog struct {
	w      logship.LogFile
	cw     *capWriter
	m      *logmask.Writer
	log    *slog.Logger
	closed bool
}

func openSetupLog(rep Reporter, secrets []string, limit int64, log *slog.Logger) *setupLog {
	w, err := rep.Log(api.SetupStep)
	if err != nil {
		log.Error("open setup log", "err", err)
		w = discardLog{}
	}
	cw := newCapWriter(w, limit)
	return &setupLog{w: w, cw: cw, m: logmask.New(cw, secrets), log: log}
}

func (s *setupLog) Write(p []byte) (int, error) {
	if s.closed {
		return len(p), nil
	}
	return s.m.Write(p)
}

func (s *setupLog) printf(format string, args ...any) {
	fmt.Fprintf(s, format, args...)
	s.flush()
}

func (s *setupLog) flush() {
	if s.closed {
		return
	}
	if err := s.m.Flush(); err != nil {
		s.log.Warn("flush setup log", "err", err)
	}
}

func (s *setupLog) close() error {
	if s == nil || s.closed {
		return nil
	}
	s.closed = true
	err := s.m.Close()
	if s.cw.lost > 0 {
		marked := s.cw.finish(lostMarkWait, s.w.FreeReserve)
		s.log.Error("setup log lost bytes", "lost_bytes", s.cw.lost, "err", s.cw.err, "marked_in_log", marked)
	}
	return errors.Join(err, s.w.Close())
}

// discardLog is a log that keeps nothing (the setup log's reporter failed).
type discardLog struct{}

func (discardLog) Write(p []byte) (int, error) { return len(p), nil }
func (discardLog) Close() error                { return nil }
func (discardLog) FreeReserve() bool           { return false }
