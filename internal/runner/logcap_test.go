package runner

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fullDisk is a log file on a disk that is full while full is set.
type fullDisk struct {
	buf  bytes.Buffer
	full bool
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if d.full {
		return 0, syscall.ENOSPC
	}
	return d.buf.Write(p)
}

// A full disk used to make the log end silently where it filled: every
// later byte dropped, no marker. Now the bytes lost are counted, the log
// says where and how many, and it goes on once there is room again.
func TestCapWriter_FullDiskLossIsMarkedWhereItHappened(t *testing.T) {
	d := &fullDisk{}
	c := newCapWriter(d, 0)
	c.Write([]byte("before\n"))
	d.full = true
	c.Write([]byte("lost 1\n"))
	c.Write([]byte("lost 2\n"))
	d.full = false
	c.Write([]byte("after\n"))
	want := "before\n" + LostMarker(14, syscall.ENOSPC) + "after\n"
	if got := d.buf.String(); got != want {
		t.Fatalf("log\n%q\nwant\n%q", got, want)
	}
	if c.lost != 14 || c.err == nil {
		t.Errorf("lost %d err %v, want 14 and ENOSPC", c.lost, c.err)
	}

	// Still full at the end: the reserve makes room for the marker.
	d2 := &fullDisk{}
	c2 := newCapWriter(d2, 0)
	c2.Write([]byte("partial line"))
	d2.full = true
	c2.Write([]byte("lost\n"))
	freed := false
	if !c2.finish(time.Second, func() bool {
		if freed {
			return false
		}
		freed, d2.full = true, false
		return true
	}) {
		t.Fatal("finish did not write the marker after the reserve was freed")
	}
	if got, want := d2.buf.String(), "partial line\n"+LostMarker(5, syscall.ENOSPC); got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
	if !strings.Contains(LostMarker(1, syscall.ENOSPC), "no space left on device") {
		t.Error("the marker does not name the error")
	}
}
