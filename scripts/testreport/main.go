// Command testreport runs `go test` with -json and prints what `go test`
// prints without -v (each package's result, the output of the tests that
// failed), then counts the skips by where they were called, with one
// message of each, so that skips never pass silently. Run from a module's
// root:
//
//	testreport -- go test -count=1 ./...
//
// It adds -json after "test", and exits with go test's status (1 when go
// test could not be started). After the skips it prints the slowest
// top-level tests (wall-clock seconds, as go test -json's Elapsed), so that
// a CI log says where a test phase's minutes went. With TESTREPORT_JSON set
// to a file name, every event line is also appended to that file.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) < 2 || args[1] != "test" {
		fmt.Fprintln(os.Stderr, "usage: testreport -- go test [flags] [packages]")
		os.Exit(2)
	}
	cmd := exec.Command(args[0], append([]string{"test", "-json"}, args[2:]...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	r := newReport(os.Stdout)
	if name := os.Getenv("TESTREPORT_JSON"); name != "" {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(1)
		}
		defer f.Close()
		r.read(io.TeeReader(stdout, f))
	} else {
		r.read(stdout)
	}
	err = cmd.Wait()
	r.summary()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on pass, fail and skip
}

// report prints events as plain `go test` would and keeps the skips.
type report struct {
	out   io.Writer
	buf   map[string][]string // output of a test still running, by package and test
	skips map[string]*skip    // by package and call site
	tests []timed             // top-level tests that ended, with their time
}

// timed is one top-level test and how long it ran, in seconds.
type timed struct {
	name    string
	seconds float64
}

// slowest is how many of the slowest tests the summary lists.
const slowest = 15

// skip is one place tests skipped at: how often, and its first message.
type skip struct {
	where, message string
	n              int
}

func newReport(out io.Writer) *report {
	return &report{out: out, buf: map[string][]string{}, skips: map[string]*skip{}}
}

func (r *report) read(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.out, sc.Text()) // not an event: pass it on
			continue
		}
		r.event(e)
	}
}

func (r *report) event(e event) {
	key := e.Package + " " + e.Test
	if e.Test != "" && !strings.Contains(e.Test, "/") && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") {
		r.tests = append(r.tests, timed{strings.TrimPrefix(e.Package, "knotless.dev/knotless/") + " " + e.Test, e.Elapsed})
	}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output)
	case e.Test == "" && e.Action == "output":
		// A package's own lines: "ok", "FAIL", "?   ... [no test
		// files]", a panic; -json's bare "PASS" is what -v adds.
		if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
			fmt.Fprint(r.out, e.Output)
		}
	case e.Test == "":
	case e.Action == "output":
		r.buf[key] = append(r.buf[key], e.Output)
	case e.Action == "fail":
		for _, l := range r.buf[key] {
			if !strings.HasPrefix(l, "=== ") {
				fmt.Fprint(r.out, l)
			}
		}
		delete(r.buf, key)
	case e.Action == "skip":
		r.skipped(e.Package, r.buf[key])
		delete(r.buf, key)
	case e.Action == "pass":
		delete(r.buf, key)
	}
}

// skipLine is a test's log line: "    file_test.go:12: message".
var skipLine = regexp.MustCompile(`^\s+(\S+\.go:\d+): (.*)$`)

// skipped records a skip of a test of pkg whose output was lines: the last
// log line before "--- SKIP" is where and why it skipped.
func (r *report) skipped(pkg string, lines []string) {
	where, msg := "(no message)", ""
	for _, l := range lines {
		if m := skipLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
			where, msg = m[1], m[2]
		}
	}
	pkg = strings.TrimPrefix(pkg, "knotless.dev/knotless/")
	k := pkg + " " + where
	s := r.skips[k]
	if s == nil {
		if len(msg) > 120 {
			msg = msg[:117] + "..."
		}
		s = &skip{where: pkg + " " + where, message: msg}
		r.skips[k] = s
	}
	s.n++
}

// summary prints the skips, most frequent first.
func (r *report) summary() {
	var all []*skip
	total := 0
	for _, s := range r.skips {
		all = append(all, s)
		total += s.n
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].where < all[j].where
	})
	fmt.Fprintf(r.out, "skips: %d tests skipped at %d places\n", total, len(all))
	for _, s := range all {
		fmt.Fprintf(r.out, "%5d  %s: %s\n", s.n, s.where, s.message)
	}
	sort.SliceStable(r.tests, func(i, j int) bool { return r.tests[i].seconds > r.tests[j].seconds })
	n := min(len(r.tests), slowest)
	if n == 0 {
		return
	}
	fmt.Fprintf(r.out, "slowest tests (%d of %d):\n", n, len(r.tests))
	for _, t := range r.tests[:n] {
		fmt.Fprintf(r.out, "%7.1fs  %s\n", t.seconds, t.name)
	}
}
