package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Line times say when the runner saw the lines of a step's log begin, so
// that a page can show a time on each line without the log's bytes
// changing. A LineTime stands for the line starting at its Offset and
// every later line up to the next LineTime's: a runner records one when a
// write begins a line at a millisecond the last one did not have.
//
// On the wire they ride on MethodAppendLog in LogTimesParam; the runner's
// spool and the server keep them in a file beside each log, as records of
// LineTimeSize bytes (offset, Unix milliseconds: little-endian int64s), in
// ascending offset order.

// LogTimesParam is the MethodAppendLog parameter carrying the line times
// of the bytes sent: "OFFSET:UNIXMS" pairs joined by commas, offsets
// ascending and within the bytes sent, at most MaxLineTimes of them. A
// server that knows it not ignores it.
const LogTimesParam = "times"

// MaxLineTimes caps the line times of one appendLog request (its request
// line stays under 8 KiB, which proxies pass).
const MaxLineTimes = 256

// LineTimeSize is the size of one record in a line times file.
const LineTimeSize = 16

// LineTime is when (Unix milliseconds, the runner's clock) the runner saw
// the line of a step's log that starts at byte Offset begin.
type LineTime struct {
	Offset int64
	UnixMS int64
}

// FormatLineTimes is the LogTimesParam value of ts.
func FormatLineTimes(ts []LineTime) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(t.Offset, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(t.UnixMS, 10))
	}
	return b.String()
}

// ParseLineTimes reads a LogTimesParam value ("" is none). Errors: a pair
// that is not two numbers, offsets not ascending, more than MaxLineTimes.
func ParseLineTimes(s string) ([]LineTime, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxLineTimes {
		return nil, fmt.Errorf("%s: %d line times, at most %d", LogTimesParam, len(parts), MaxLineTimes)
	}
	out := make([]LineTime, 0, len(parts))
	for _, p := range parts {
		o, ms, ok := strings.Cut(p, ":")
		off, err1 := strconv.ParseInt(o, 10, 64)
		at, err2 := strconv.ParseInt(ms, 10, 64)
		if !ok || err1 != nil || err2 != nil || off < 0 {
			return nil, fmt.Errorf("%s: %q is not OFFSET:UNIXMS", LogTimesParam, p)
		}
		if len(out) > 0 && off <= out[len(out)-1].Offset {
			return nil, fmt.Errorf("%s: offsets must ascend (%d after %d)", LogTimesParam, off, out[len(out)-1].Offset)
		}
		out = append(out, LineTime{Offset: off, UnixMS: at})
	}
	return out, nil
}

// AppendLineTime appends t's record to b.
func AppendLineTime(b []byte, t LineTime) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(t.Offset))
	return binary.LittleEndian.AppendUint64(b, uint64(t.UnixMS))
}

// ReadLineTimesFile is ReadLineTimes of the line times file at path; none
// when there is no such file.
func ReadLineTimesFile(path string, from, to int64, max int, before bool) ([]LineTime, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	ts, err := ReadLineTimes(f, fi.Size(), from, to, max, before)
	if errors.Is(err, io.EOF) {
		err = nil // a record torn as it was read: what came before it stands
	}
	return ts, err
}

// ReadLineTimes reads, from a line times file r of size bytes, the records
// whose offsets are in [from, to), at most max of them (0: no limit),
// finding the first by binary search. With before set it also returns the
// last record below from (the time of a line at from that has none of its
// own), first. A torn last record (a crash mid-write) is left out.
func ReadLineTimes(r io.ReaderAt, size, from, to int64, max int, before bool) ([]LineTime, error) {
	n := int(size / LineTimeSize)
	var rec [LineTimeSize]byte
	at := func(i int) (LineTime, error) {
		if _, err := r.ReadAt(rec[:], int64(i)*LineTimeSize); err != nil {
			return LineTime{}, err
		}
		return LineTime{Offset: int64(binary.LittleEndian.Uint64(rec[:8])), UnixMS: int64(binary.LittleEndian.Uint64(rec[8:]))}, nil
	}
	var ferr error
	i := sort.Search(n, func(i int) bool {
		t, err := at(i)
		if err != nil {
			ferr = err
			return true
		}
		return t.Offset >= from
	})
	if ferr != nil {
		return nil, ferr
	}
	var out []LineTime
	if before && i > 0 {
		t, err := at(i - 1)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	for taken := 0; i < n && (max <= 0 || taken < max); i, taken = i+1, taken+1 {
		t, err := at(i)
		if err != nil {
			return nil, err
		}
		if t.Offset >= to {
			break
		}
		out = append(out, t)
	}
	return out, nil
}
