package workflow

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// lintLines is LintFile as "LINE:COL: message" lines.
func lintLines(src string) []string {
	var out []string
	for _, e := range LintFile("w.yml", []byte(src)) {
		out = append(out, fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg))
	}
	return out
}

// wantErrors checks that src gives exactly the errors want ("LINE:COL:
// substring"), in order.
func wantErrors(t *testing.T, src string, want ...string) {
	t.Helper()
	got := lintLines(src)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range got {
		at, msg, _ := strings.Cut(want[i], ": ")
		if !strings.HasPrefix(got[i], at+": ") || !strings.Contains(got[i], msg) {
			t.Errorf("error %d = %q\nwant at %s containing %q", i, got[i], at, msg)
		}
	}
}

func TestMatrix_ThreeByThreeWithOneExcludeExpandsToEightRuns(t *testing.T) {
	runs, err := Expand(".knotless/workflows/test.yml", []byte(`matrix:
  os: [debian, alpine, ubuntu]
  go: ["1.24", "1.25", "1.26"]
  exclude:
    - {os: alpine, go: "1.24"}
steps:
  - run: go test ./...
`))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range runs {
		names = append(names, r.Name)
	}
	want := []string{
		"test (debian, 1.24)", "test (debian, 1.25)", "test (debian, 1.26)",
		"test (alpine, 1.25)", "test (alpine, 1.26)",
		"test (ubuntu, 1.24)", "test (ubuntu, 1.25)", "test (ubuntu, 1.26)",
	}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Errorf("runs:\n%s\nwant (8):\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range runs {
		if r.Base != "test" || r.Matrix == nil || len(r.Combo) != 2 {
			t.Errorf("run %q: Base %q, Combo %v; want base test and two values", r.Name, r.Base, r.Combo)
		}
	}
}

// GitHub Actions' documented example of include: values added to the
// combinations an entry matches (an added value may be overwritten, an
// axis value never), and an entry that matches none becomes a run.
func TestMatrix_IncludeAddsValuesAsGitHubActionsDocumentsIt(t *testing.T) {
	runs, err := Expand("w.yml", []byte(`matrix:
  fruit: [apple, pear]
  animal: [cat, dog]
  include:
    - color: green
    - color: pink
      animal: cat
    - fruit: apple
      shape: circle
    - fruit: banana
    - fruit: banana
      animal: cat
steps: [{run: "true"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.Combo.String())
	}
	want := []string{
		"fruit=apple, animal=cat, color=pink, shape=circle",
		"fruit=apple, animal=dog, color=green, shape=circle",
		"fruit=pear, animal=cat, color=pink",
		"fruit=pear, animal=dog, color=green",
		"fruit=banana",
		"fruit=banana, animal=cat",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("runs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMatrix_PastTheCapIsAClearErrorAtTheMatrix(t *testing.T) {
	var a, b []string
	for i := 0; i < 17; i++ {
		a = append(a, fmt.Sprintf("%q", fmt.Sprint("a", i)))
		b = append(b, fmt.Sprintf("%q", fmt.Sprint("b", i)))
	}
	src := "steps: [{run: x}]\nmatrix:\n  a: [" + strings.Join(a, ", ") + "]\n  b: [" + strings.Join(b, ", ") + "]\n"
	wantErrors(t, src, "2:1: matrix makes 289 runs; at most 256")
	// At the cap exactly, it is fine.
	src = "steps: [{run: x}]\nmatrix:\n  a: [" + strings.Join(a[:16], ", ") + "]\n  b: [" + strings.Join(b[:16], ", ") + "]\n"
	if runs, err := Expand("w.yml", []byte(src)); err != nil || len(runs) != MaxMatrixRuns {
		t.Errorf("a 16×16 matrix: %d runs, %v; want %d", len(runs), err, MaxMatrixRuns)
	}
}

func TestMatrix_ValuesReachEveryStringOfTheRun(t *testing.T) {
	runs, err := Expand("w.yml", []byte(`name: build-{{ matrix.os }}
matrix:
  os: [linux, arm]
  include:
    - {os: linux, image: "debian:12", mem: 1Gi}
    - {os: arm, image: "alpine:3", mem: 512Mi}
runners: ["{{matrix.os}}"]
image: "{{ matrix.image }}"
env: {TARGET: "{{ matrix.os }}"}
resources: {memory: "{{ matrix.mem }}", cpus: "1"}
outputs: ["dist/{{ matrix.os }}/"]
concurrency: "ci-{{ matrix.os }}-{{ ref }}"
steps:
  - name: "make {{ matrix.os }}"
    run: make TARGET={{ matrix.os }}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	r := runs[1]
	for what, got := range map[string]string{
		"name": r.Name, "base": r.Base, "runners": strings.Join(r.Runners, ","), "image": r.Image, "env": r.Env["TARGET"],
		"output": r.Outputs[0], "step name": r.Steps[0].Name, "run": r.Steps[0].Run,
		"memory": fmt.Sprint(r.Resources.MemoryBytes), "group": r.Concurrency.GroupFor("refs/heads/main", r.Name, "push"),
	} {
		want := map[string]string{
			"name": "build-arm", "base": "w", "runners": "arm", "image": "alpine:3", "env": "arm", "output": "dist/arm/",
			"step name": "make arm", "run": "make TARGET=arm", "memory": fmt.Sprint(512 << 20), "group": "ci-arm-refs/heads/main",
		}[what]
		if got != want {
			t.Errorf("%s = %q, want %q", what, got, want)
		}
	}
}

// A value that is wrong where it lands is reported at its place, saying
// which run it is wrong for.
func TestMatrix_ValueWrongInOneRunSaysWhichRun(t *testing.T) {
	wantErrors(t, `matrix:
  mem: [1Gi, 4GB]
resources:
  memory: "{{ matrix.mem }}"
steps: [{run: x}]
`, `4:11: resources.memory: unknown size suffix "GB" in "4GB"; use Ki, Mi, Gi, Ti (1024-based) or k, M, G, T (1000-based) (in the run with mem=4GB)`)
}

// Every new key's mistakes are errors at their line and column.
func TestLint_NewKeysErrorsNameLineAndColumn(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"MatrixEmpty", "matrix:\nsteps: [{run: x}]\n", []string{"1:1: matrix is empty"}},
		{"MatrixNotMapping", "matrix: [a, b]\nsteps: [{run: x}]\n", []string{"1:9: matrix must be a mapping"}},
		{"MatrixAxisNotList", "matrix: {os: linux}\nsteps: [{run: x}]\n", []string{"1:14: matrix.os must be a list"}},
		{"MatrixAxisEmpty", "matrix: {os: []}\nsteps: [{run: x}]\n", []string{"1:14: matrix.os has no values"}},
		{"MatrixValueNumber", "matrix:\n  go: [1.25, \"1.26\"]\nsteps: [{run: x}]\n", []string{`2:8: an entry of matrix.go must be a string; got a number, quote it: "1.25"`}},
		{"MatrixValueTwice", "matrix:\n  go: [\"1\", \"1\"]\nsteps: [{run: x}]\n", []string{`2:13: matrix.go lists "1" twice (first at 2:8)`}},
		{"MatrixBadName", "matrix:\n  go.version: [\"1\"]\nsteps: [{run: x}]\n", []string{`2:3: matrix name "go.version": use letters, digits`}},
		{"MatrixFailFastNotBool", "matrix:\n  os: [a]\n  fail-fast: yes please\nsteps: [{run: x}]\n", []string{"3:14: matrix fail-fast must be true or false"}},
		{"ExcludeUnknownName", "matrix:\n  os: [a, b]\n  exclude:\n    - {arch: x}\nsteps: [{run: x}]\n", []string{`4:8: matrix exclude names "arch", which is not a name of the matrix (it has: os)`}},
		{"ExcludeUnknownValue", "matrix:\n  os: [a, b]\n  exclude:\n    - {os: c}\nsteps: [{run: x}]\n", []string{`4:12: matrix exclude: "c" is not a value of matrix.os (it has: a, b)`}},
		{"ExcludeEverything", "matrix:\n  os: [a]\n  exclude:\n    - {os: a}\nsteps: [{run: x}]\n", []string{"1:1: matrix makes no run: exclude removes every combination"}},
		{"IncludeEmptyEntry", "matrix:\n  os: [a]\n  include:\n    - {}\nsteps: [{run: x}]\n", []string{"4:7: an entry of matrix include is empty"}},
		{"IncludeNotList", "matrix:\n  os: [a]\n  include: {os: b}\nsteps: [{run: x}]\n", []string{"3:12: matrix include must be a list"}},
		{"MatrixRefUnknownName", "matrix:\n  os: [a]\nimage: \"img:{{ matrix.oss }}\"\nsteps: [{run: x}]\n", []string{"3:8: image uses {{ matrix.oss }}, which the matrix does not define (it has: os)"}},
		{"MatrixRefWithoutMatrix", "steps:\n  - run: echo {{ matrix.os }}\n", []string{"2:10: step 1 run uses {{ matrix.os }} but the workflow has no matrix:"}},
		{"MatrixRefInOn", "matrix: {br: [main]}\non:\n  push:\n    branches: [\"{{ matrix.br }}\"]\nsteps: [{run: x}]\n", []string{"4:16: an entry of on.push.branches cannot use {{ matrix.br }}: on is the same for every run of a matrix"}},
		{"MatrixRefInMatrix", "matrix:\n  a: [x]\n  b: [\"{{ matrix.a }}\"]\nsteps: [{run: x}]\n", []string{"3:7: an entry of matrix.b cannot use {{ matrix.a }}: matrix is the same"}},
		{"MatrixSameDirName", "matrix:\n  v: [\"a/b\", \"a_b\"]\nsteps: [{run: x}]\n", []string{`1:1: matrix runs v=a/b and v=a_b have the same directory name "a_b"`}},
		{"NeedsNotList", "needs: build\nsteps: [{run: x}]\n", []string{"1:8: needs must be a list, like [build]"}},
		{"NeedsWithSlash", "needs: [.knotless/workflows/build.yml]\nsteps: [{run: x}]\n", []string{`1:9: needs ".knotless/workflows/build.yml": name a workflow by its name: or its file name`}},
		{"NeedsTwice", "needs: [a, a]\nsteps: [{run: x}]\n", []string{`1:12: needs lists "a" twice (first at 1:9)`}},
		{"NeedsMatrixRef", "matrix: {a: [x]}\nneeds: [\"{{ matrix.a }}\"]\nsteps: [{run: x}]\n", []string{"2:9: an entry of needs cannot use {{ matrix.a }}"}},
		{"RetryZero", "retry: 0\nsteps: [{run: x}]\n", []string{"1:8: retry max must be a whole number of attempts after the first, 1 to 5; got 0"}},
		{"RetryTooMany", "retry: {max: 9}\nsteps: [{run: x}]\n", []string{"1:14: retry max must be a whole number of attempts after the first, 1 to 5; got 9"}},
		{"RetryString", "retry: always\nsteps: [{run: x}]\n", []string{"1:8: retry must be a number of attempts (retry: 2) or a mapping"}},
		{"RetryExitCode", "retry:\n  when: [evicted, exit-code]\nsteps: [{run: x}]\n", []string{"2:19: retry.when: exit-code is a step's own failure, which is never retried"}},
		{"RetryCancelled", "retry:\n  when: [cancelled]\nsteps: [{run: x}]\n", []string{"2:10: retry.when: a cancelled run is never retried"}},
		{"RetryUnknownReason", "retry:\n  when: [evictd]\nsteps: [{run: x}]\n", []string{`2:10: retry.when: unknown reason "evictd"; want one of evicted, preempted, pod-lost, runner-lost, executor, image-pull, unschedulable`}},
		{"RetryUnknownKey", "retry:\n  maximum: 2\nsteps: [{run: x}]\n", []string{`2:3: unknown key "maximum" in retry; expected one of: max, when`}},
		{"RetryWhenEmpty", "retry:\n  when: []\nsteps: [{run: x}]\n", []string{"2:9: retry.when is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantErrors(t, tc.src, tc.want...) })
	}
}

func TestParseRun_DecodesOnlyTheRunOfItsValues(t *testing.T) {
	src := []byte("matrix:\n  os: [a, b]\nimage: \"img:{{ matrix.os }}\"\nsteps: [{run: x}]\n")
	w, err := ParseRun("w.yml", src, Combo{{"os", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if w.Image != "img:b" || w.Name != "w (b)" {
		t.Errorf("image %q name %q, want img:b and w (b)", w.Image, w.Name)
	}
	_, err = ParseRun("w.yml", src, Combo{{"os", "c"}})
	var list ErrorList
	if !errors.As(err, &list) || !strings.Contains(err.Error(), "w.yml:1:1: the run's matrix values (os=c) are not one of the workflow's runs") {
		t.Errorf("a run the file does not make: %v", err)
	}
	if _, err := ParseRun("w.yml", src, nil); err == nil {
		t.Errorf("no values for a matrix workflow: no error")
	}
	if w, err := ParseRun("w.yml", []byte("steps: [{run: x}]\n"), nil); err != nil || w.Name != "w" {
		t.Errorf("a workflow without a matrix: %+v, %v", w, err)
	}
}

func TestRetry_OnlyItsReasonsAndAttemptsRetry(t *testing.T) {
	w := mustParse(t, "w.yml", "retry: {max: 2, when: [evicted]}\nsteps: [{run: x}]\n")
	for _, tc := range []struct {
		attempt int
		reason  string
		want    bool
	}{{1, "evicted", true}, {2, "evicted", true}, {3, "evicted", false}, {1, "runner-lost", false}, {1, "exit-code", false}} {
		if got := w.Retry.Retries(tc.attempt, tc.reason); got != tc.want {
			t.Errorf("attempt %d, %s: retries %v, want %v", tc.attempt, tc.reason, got, tc.want)
		}
	}
	all := mustParse(t, "w.yml", "retry: 1\nsteps: [{run: x}]\n")
	if all.Retry.Max != 1 || strings.Join(all.Retry.When, ",") != strings.Join(RetryReasons, ",") {
		t.Errorf("retry: 1 = %+v, want once on every reason", all.Retry)
	}
	if mustParse(t, "w.yml", "steps: [{run: x}]\n").Retry.Retries(1, "evicted") {
		t.Errorf("a workflow without retry: retries")
	}
}

func TestExports_ParseTakesNameValueLinesAndSaysWhatItSkips(t *testing.T) {
	got, problems := ParseExports([]byte("# built\nVERSION=1.2.3\n\nURL=https://x/?a=b\nbad line\n1X=y\nVERSION=1.2.4\r\n"))
	if got["VERSION"] != "1.2.4" || got["URL"] != "https://x/?a=b" || len(got) != 2 {
		t.Errorf("values %v", got)
	}
	want := []string{ExportFile + ":5: no = in the line", ExportFile + `:6: "1X" is not a valid name`}
	if len(problems) != 2 || !strings.HasPrefix(problems[0], want[0]) || !strings.HasPrefix(problems[1], want[1]) {
		t.Errorf("problems %q, want %q", problems, want)
	}
	if string(FormatExports(got)) != "URL=https://x/?a=b\nVERSION=1.2.4\n" {
		t.Errorf("FormatExports: %q", FormatExports(got))
	}
	if _, p := ParseExports(make([]byte, MaxExportSize+1)); len(p) != 1 || !strings.Contains(p[0], "nothing exported") {
		t.Errorf("too large: %q", p)
	}
}

// A name that include adds to some runs only is empty in the others, as
// in GitHub Actions.
func TestMatrix_NameOnlySomeRunsHaveIsEmptyInTheOthers(t *testing.T) {
	runs, err := Expand("w.yml", []byte("matrix:\n  os: [a, b]\n  include:\n    - {os: a, cov: \"yes\"}\nenv: {COV: \"x{{ matrix.cov }}\"}\nsteps: [{run: x}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].Env["COV"] != "xyes" || runs[1].Env["COV"] != "x" {
		t.Errorf("COV = %q, %q; want xyes and x", runs[0].Env["COV"], runs[1].Env["COV"])
	}
}
