// Command kubelogswriter is the step of the kubelogs benchmark (bench/
// kubelogs.go): it writes numbered lines (package kubelogsline) at a
// steady rate, each carrying the writer's clock, to its stdout or, with
// -connect, to a TCP connection, and ends with a summary line. The
// benchmark builds it static (CGO_ENABLED=0) and puts it in each pod.
//
// With -barrier it first dials that address, sends -id and a newline, and
// waits for "start UNIXNS\n": every stream of a benchmark starts at the
// same moment, however long its pod took to start. Each -tick it writes
// the lines due by then in one write, all with the clock of that moment.
// The summary is "end LINES BYTES FIRSTNS LASTNS MAXLATEUS": the lines and
// bytes written before it, the clock of the first and the last write, and
// the most a write started late against the schedule, in microseconds
// (the step's own pace held back: a CPU quota, a blocking write).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	line "knotless.dev/knotless/bench/kubelogsline"
)

func main() {
	rate := flag.Int64("rate", 1_000_000, "bytes a second")
	secs := flag.Float64("seconds", 20, "seconds of writing")
	barrier := flag.String("barrier", "", "HOST:PORT to wait at for the start time")
	connect := flag.String("connect", "", "HOST:PORT to write to over TCP (after a line holding -id) instead of stdout")
	id := flag.String("id", "", "the stream's name, sent to -barrier and -connect")
	tick := flag.Duration("tick", 20*time.Millisecond, "how often the lines due are written")
	flag.Parse()
	if *barrier != "" {
		start, err := wait(*barrier, *id)
		if err != nil {
			fail(err)
		}
		time.Sleep(time.Until(start))
	}
	var w io.Writer = os.Stdout
	if *connect != "" {
		c, err := dial(*connect)
		if err != nil {
			fail(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "%s\n", *id); err != nil {
			fail(err)
		}
		w = c
	}
	total := int64(float64(*rate) * *secs / line.Len)
	buf := make([]byte, 0, 1<<20)
	t0 := time.Now()
	var seq, first, last int64
	var maxLate time.Duration
	for seq < total {
		now := time.Now()
		el := now.Sub(t0)
		due := min(total, int64(float64(*rate)*el.Seconds()/line.Len)+1)
		if due > seq {
			sched := time.Duration(float64(seq*line.Len) / float64(*rate) * float64(time.Second))
			maxLate = max(maxLate, el-sched)
			ns := now.UnixNano()
			if first == 0 {
				first = ns
			}
			last = ns
			buf = buf[:0]
			for ; seq < due; seq++ {
				buf = line.Append(buf, seq, ns)
			}
			if _, err := w.Write(buf); err != nil {
				fail(err)
			}
		}
		time.Sleep(*tick - time.Since(now))
	}
	if _, err := fmt.Fprintf(w, "end %d %d %d %d %d\n", total, total*line.Len, first, last, maxLate.Microseconds()); err != nil {
		fail(err)
	}
}

// dial connects to addr, trying for 10 s.
func dial(addr string) (net.Conn, error) {
	var err error
	for i := 0; i < 100; i++ {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			return c, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// wait sends id to the barrier at addr and returns the start it answers.
func wait(addr, id string) (time.Time, error) {
	c, err := dial(addr)
	if err != nil {
		return time.Time{}, err
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "%s\n", id); err != nil {
		return time.Time{}, err
	}
	s, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return time.Time{}, fmt.Errorf("barrier %s: %w", addr, err)
	}
	ns, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(s), "start "), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("barrier %s answered %q", addr, s)
	}
	return time.Unix(0, ns), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kubelogswriter:", err)
	os.Exit(1)
}
