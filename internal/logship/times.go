package logship

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"knotless.dev/knotless/internal/api"
)

// A step's line times (api.LineTime) are recorded as its log is written:
// step-<N>.times beside step-<N>.log holds a record for each write that
// began a line at a millisecond the previous record did not have, so a
// line's time is the time of the last record at or before its offset. The
// shipper sends them with the log bytes they belong to (api.LogTimesParam).
// They are a help for people, never a reason to fail: a times file that
// cannot be written leaves the log without times.

func (s *Spool) timesPath(step int) string {
	return filepath.Join(s.dir, fmt.Sprintf("step-%d.times", step))
}

// lineTimes records the line times of one open log.
type lineTimes struct {
	f         *os.File
	off       int64 // the log's size: the offset of the next byte written
	lineStart bool  // the next byte begins a line
	lastMS    int64 // the last record's time
	buf       []byte
}

// openTimes opens step's times file for appending, for the log file log
// (open at its end); nil when it cannot.
func (s *Spool) openTimes(step int, log *os.File) *lineTimes {
	fi, err := log.Stat()
	if err != nil {
		return nil
	}
	t := &lineTimes{off: fi.Size(), lineStart: true}
	if t.off > 0 {
		var last [1]byte
		if _, err := log.ReadAt(last[:], t.off-1); err != nil {
			return nil
		}
		t.lineStart = last[0] == '\n'
	}
	f, err := os.OpenFile(s.timesPath(step), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil
	}
	if fi, err := f.Stat(); err == nil && fi.Size() >= api.LineTimeSize {
		if ts, err := api.ReadLineTimes(f, fi.Size(), 1<<62, 1<<63-1, 0, true); err == nil && len(ts) > 0 {
			t.lastMS = ts[0].UnixMS
		}
	}
	t.f = f
	return t
}

// writing records the line time of p, about to be written at the log's
// end at now: the first line p begins, if any.
func (t *lineTimes) writing(p []byte, now time.Time) {
	if t == nil || len(p) == 0 {
		return
	}
	start := -1
	if t.lineStart {
		start = 0
	} else if i := indexNewline(p[:len(p)-1]); i >= 0 {
		start = i + 1
	}
	if ms := now.UnixMilli(); start >= 0 && ms != t.lastMS {
		t.buf = api.AppendLineTime(t.buf[:0], api.LineTime{Offset: t.off + int64(start), UnixMS: ms})
		if _, err := t.f.Write(t.buf); err == nil {
			t.lastMS = ms
		}
	}
}

// wrote moves past p, the bytes written.
func (t *lineTimes) wrote(p []byte) {
	if t == nil || len(p) == 0 {
		return
	}
	t.off += int64(len(p))
	t.lineStart = p[len(p)-1] == '\n'
}

func indexNewline(p []byte) int {
	for i, b := range p {
		if b == '\n' {
			return i
		}
	}
	return -1
}

func (t *lineTimes) close() {
	if t != nil {
		_ = t.f.Close()
	}
}

// LineTimes returns step's line times with offsets in [from, to), at most
// max of them (0: all), and, with before, the last one below from first.
// None when the step has no times file.
func (s *Spool) LineTimes(step int, from, to int64, max int, before bool) ([]api.LineTime, error) {
	ts, err := api.ReadLineTimesFile(s.timesPath(step), from, to, max, before)
	if err != nil {
		return nil, fmt.Errorf("read line times of run %d step %d: %w", s.run, step, err)
	}
	return ts, nil
}

// cutTimes drops step's line times at or past size (its log was cut back
// to size bytes, to be written again).
func (s *Spool) cutTimes(step int, size int64) error {
	f, err := os.OpenFile(s.timesPath(step), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	keep, err := api.ReadLineTimes(f, fi.Size(), 0, size, 0, false)
	if err != nil {
		return err
	}
	return f.Truncate(int64(len(keep)) * api.LineTimeSize)
}
