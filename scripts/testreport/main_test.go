package main

import (
	"strings"
	"testing"
)

// A stream of `go test -json` events: the failed test's output and the
// package lines are printed as plain `go test` would; passing tests' output
// is not; skips are counted by where they were called, with a message;
// the slowest top-level tests (subtests left out) are listed last.
func TestReport_PrintsFailuresAndCountsSkipsByPlace(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"knotless.dev/knotless/internal/x"}`,
		`{"Action":"run","Package":"knotless.dev/knotless/internal/x","Test":"TestA"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Test":"TestA","Output":"    a_test.go:9: no pty here\n"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}`,
		`{"Action":"skip","Package":"knotless.dev/knotless/internal/x","Test":"TestA"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Test":"TestB","Output":"    a_test.go:9: no pty here either\n"}`,
		`{"Action":"skip","Package":"knotless.dev/knotless/internal/x","Test":"TestB"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Test":"TestC","Output":"    c_test.go:3: fine\n"}`,
		`{"Action":"pass","Package":"knotless.dev/knotless/internal/x","Test":"TestC","Elapsed":2.5}`,
		`{"Action":"pass","Package":"knotless.dev/knotless/internal/x","Test":"TestC/sub","Elapsed":2.4}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Test":"TestD","Output":"=== RUN   TestD\n"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Test":"TestD","Output":"    d_test.go:4: broken\n"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Test":"TestD","Output":"--- FAIL: TestD (0.00s)\n"}`,
		`{"Action":"fail","Package":"knotless.dev/knotless/internal/x","Test":"TestD"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"knotless.dev/knotless/internal/x","Output":"FAIL\tknotless.dev/knotless/internal/x\t0.1s\n"}`,
		`{"Action":"fail","Package":"knotless.dev/knotless/internal/x"}`,
		`not json`,
	}, "\n") + "\n"
	var out strings.Builder
	r := newReport(&out)
	r.read(strings.NewReader(in))
	r.summary()
	want := "    d_test.go:4: broken\n--- FAIL: TestD (0.00s)\nFAIL\nFAIL\tknotless.dev/knotless/internal/x\t0.1s\nnot json\n" +
		"skips: 2 tests skipped at 1 places\n    2  internal/x a_test.go:9: no pty here\n" +
		"slowest tests (4 of 4):\n    2.5s  internal/x TestC\n    0.0s  internal/x TestA\n    0.0s  internal/x TestB\n    0.0s  internal/x TestD\n"
	if out.String() != want {
		t.Fatalf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}
