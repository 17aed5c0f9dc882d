package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/bench/kubelogsline"
)

// stream is what the writer writes: lines 0..n-1 but those in drop, then
// its summary.
func stream(n int64, drop map[int64]bool) []byte {
	var b []byte
	for i := range n {
		if !drop[i] {
			b = kubelogsline.Append(b, i, 1000)
		}
	}
	return fmt.Appendf(b, "end %d %d 1000 2000 7\n", n, n*kubelogsline.Len)
}

// feedPieces feeds b into s in pieces of 37 bytes, the k-th seen at
// 1000 + k ms.
func feedPieces(s *lineStream, b []byte) {
	for k := 0; len(b) > 0; k++ {
		n := min(37, len(b))
		s.feed(b[:n], 1000+int64(k)*int64(time.Millisecond))
		b = b[n:]
	}
}

func TestLineStreamIsWholeOnlyWithEveryLineInOrder(t *testing.T) {
	s := &lineStream{h: newDelayHist()}
	feedPieces(s, stream(50, nil))
	s.finish(50)
	if !s.whole(50) || s.lost != 0 || s.bad != 0 || s.lines != 50 {
		t.Fatalf("an intact stream: whole %v, lost %d, bad %d, lines %d, problems %v", s.whole(50), s.lost, s.bad, s.lines, s.problems)
	}
	if sp := s.h.spread(); sp.N != 50 || sp.Max <= 0 {
		t.Errorf("delays of an intact stream: %+v", sp)
	}

	lost := &lineStream{h: newDelayHist()}
	feedPieces(lost, stream(50, map[int64]bool{17: true}))
	lost.finish(50)
	if lost.whole(50) || lost.lost != 1 {
		t.Errorf("a stream missing line 17: whole %v, lost %d (want 1), problems %v", lost.whole(50), lost.lost, lost.problems)
	}

	cut := &lineStream{h: newDelayHist()}
	b := stream(50, nil)
	feedPieces(cut, b[:20*kubelogsline.Len+5]) // the writer's tail and summary never came
	cut.finish(50)
	if cut.whole(50) || cut.lost != 30 || cut.bad != 1 {
		t.Errorf("a stream cut after line 19: whole %v, lost %d (want 30), bad %d (want 1, the torn line)", cut.whole(50), cut.lost, cut.bad)
	}

	changed := &lineStream{h: newDelayHist()}
	b = stream(50, nil)
	b[3*kubelogsline.Len+40] ^= 1
	feedPieces(changed, b)
	changed.finish(50)
	if changed.whole(50) || changed.bad != 1 {
		t.Errorf("a stream with a byte of line 3 changed: whole %v, bad %d (want 1)", changed.whole(50), changed.bad)
	}
}

func TestBarrierStartsEveryWriterAtTheSameTimeAndLatecomersAtOnce(t *testing.T) {
	b, err := newBarrier("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	arrive := func(id string) (chan time.Time, error) {
		c, err := net.Dial("tcp", b.addr())
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(c, "%s\n", id)
		got := make(chan time.Time, 1)
		go func() {
			defer c.Close()
			s, _ := bufio.NewReader(c).ReadString('\n')
			ns, _ := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(s), "start "), 10, 64)
			got <- time.Unix(0, ns)
		}()
		return got, nil
	}
	var waits []chan time.Time
	for i := range 3 {
		w, err := arrive(strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
	}
	start, got, err := b.release(context.Background(), 3, 10*time.Second, 200*time.Millisecond)
	if err != nil || got != 3 {
		t.Fatalf("release: %d arrived, %v", got, err)
	}
	for i, w := range waits {
		if s := <-w; !s.Equal(start) {
			t.Errorf("writer %d was told %v, want the common start %v", i, s, start)
		}
	}
	late, err := arrive("late")
	if err != nil {
		t.Fatal(err)
	}
	if s := <-late; s.Before(start) || b.latecomers() != 1 {
		t.Errorf("a latecomer was told %v (common start %v), latecomers %d", s, start, b.latecomers())
	}
}
