package logship

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// TestSpool_LineTimesMarkWhereLinesBeganOnceAMillisecond pins the
// runner's record of line times (issue 25 item 3): a write that begins a
// line records its offset and time, unless the last record has the same
// millisecond (the line then shares it); a write in the middle of a line
// records nothing until the next line begins; ResumeLog cuts the times
// back with the log.
// timedLog opens step 1's log of a new spool of run, and returns a
// function writing to it as at a given time.
func timedLog(t *testing.T, run int64) (*Spool, LogFile, func(s string, at time.Time)) {
	t.Helper()
	sp, err := CreateSpool(t.TempDir(), run)
	if err != nil {
		t.Fatal(err)
	}
	w, err := sp.Log(1)
	if err != nil {
		t.Fatal(err)
	}
	l := w.(*spoolLog)
	return sp, w, func(s string, at time.Time) {
		t.Helper()
		l.times.writing([]byte(s), at)
		if _, err := l.f.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		l.times.wrote([]byte(s))
	}
}

func TestSpool_LineTimesMarkWhereLinesBeganOnceAMillisecond(t *testing.T) {
	sp, w, write := timedLog(t, 3)
	t0 := time.UnixMilli(1_700_000_000_000)
	write("one\ntw", t0)                            // lines at 0 and 4: one record, 0
	write("o\nthree\n", t0.Add(5*time.Millisecond)) // a line at 8
	write("four\n", t0.Add(5*time.Millisecond))     // same millisecond: none
	write("fi", t0.Add(9*time.Millisecond))         // a line at 19
	write("ve\n", t0.Add(30*time.Millisecond))      // mid-line: none
	w.Close()
	got, err := sp.LineTimes(1, 0, 1<<40, 0, false)
	want := []api.LineTime{{Offset: 0, UnixMS: t0.UnixMilli()}, {Offset: 8, UnixMS: t0.UnixMilli() + 5}, {Offset: 19, UnixMS: t0.UnixMilli() + 9}}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("line times %v, %v; want %v", got, err, want)
	}
	if got, _ := sp.LineTimes(1, 9, 1<<40, 0, true); fmt.Sprint(got) != fmt.Sprint(want[1:]) {
		t.Errorf("times from 9 with the one before: %v", got)
	}
	// A reopened log goes on from its end: a line starts at 24.
	w2, _ := sp.Log(1)
	w2.Write([]byte("six\n"))
	w2.Close()
	if got, _ := sp.LineTimes(1, 20, 1<<40, 0, false); len(got) != 1 || got[0].Offset != 24 {
		t.Errorf("the reopened log's line time: %v, want one at 24", got)
	}
	if _, _, err := sp.ResumeLog(1, 8); err != nil {
		t.Fatal(err)
	}
	if got, _ := sp.LineTimes(1, 0, 1<<40, 0, false); fmt.Sprint(got) != fmt.Sprint(want[:1]) {
		t.Errorf("after ResumeLog at 8: %v, want %v", got, want[:1])
	}
}

// TestShipper_SendsEachLineTimeOnceWithItsBytes: the shipper sends every
// line time with the bytes it belongs to, no request carries more than
// api.MaxLineTimes (a range with more is cut short and goes on in the
// next), and the server gets them all, once.
func TestShipper_SendsEachLineTimeOnceWithItsBytes(t *testing.T) {
	srv := newLogServer()
	sp, w, write := timedLog(t, 9)
	t0 := time.UnixMilli(1_700_000_000_000)
	const lines = 3*api.MaxLineTimes + 10
	var want []api.LineTime
	var log strings.Builder
	for i := range lines {
		line := fmt.Sprintf("line %d\n", i)
		want = append(want, api.LineTime{Offset: int64(log.Len()), UnixMS: t0.UnixMilli() + int64(i)})
		log.WriteString(line)
		write(line, t0.Add(time.Duration(i)*time.Millisecond))
	}
	w.Close()
	appendDone(t, sp, api.CompleteInput{State: api.StateSucceeded})
	_, done := startShipper(t, srv, sp)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if string(srv.logs["9/1"]) != log.String() {
		t.Fatalf("log delivered: %d bytes, want %d", len(srv.logs["9/1"]), log.Len())
	}
	if fmt.Sprint(srv.times["9/1"]) != fmt.Sprint(want) {
		t.Fatalf("line times delivered: %d, want %d, each once", len(srv.times["9/1"]), len(want))
	}
	if srv.maxTimes > api.MaxLineTimes || srv.maxTimes == 0 {
		t.Fatalf("a request carried %d line times, want 1..%d", srv.maxTimes, api.MaxLineTimes)
	}
	if _, err := os.Stat(sp.Dir()); !os.IsNotExist(err) {
		t.Errorf("the delivered spool is still there: %v", err)
	}
}
