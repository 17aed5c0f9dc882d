package workflow

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, and that its answer
// is always well formed: a valid Workflow, or a sorted, non-empty
// ErrorList with real positions. Seeds: testdata/fuzz/FuzzParse/.
func FuzzParse(f *testing.F) {
	f.Add([]byte("steps:\n  - run: make test\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		w, err := Parse(".knotless/workflows/fuzz.yml", src)
		if err != nil {
			if w != nil {
				t.Fatal("Workflow and error both returned")
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error %T %v is not a non-empty ErrorList", err, err)
			}
			for i, e := range list {
				if e.Line < 1 || e.Col < 1 || e.Msg == "" || e.Path != ".knotless/workflows/fuzz.yml" {
					t.Fatalf("malformed error %#v", e)
				}
				if i > 0 && (list[i-1].Line > e.Line || list[i-1].Line == e.Line && list[i-1].Col > e.Col) {
					t.Fatalf("errors out of file order: %v then %v", list[i-1], e)
				}
			}
			return
		}
		if w == nil || w.Name == "" || w.Timeout <= 0 || len(w.Steps) == 0 {
			t.Fatalf("accepted an incomplete workflow %+v", w)
		}
		for _, s := range w.Steps {
			if (s.Run == "") == (s.Uses == "") {
				t.Fatalf("step %+v has not exactly one of run and uses", s)
			}
			if len(s.ShellCommand()) == 0 {
				t.Fatalf("step %+v has no shell", s)
			}
		}
		for _, ev := range []Event{
			{Kind: EventPush, Ref: "refs/heads/main"},
			{Kind: EventPush, Ref: "refs/tags/v1"},
			{Kind: EventPull, Ref: "refs/heads/a/b"},
			{Kind: EventManual},
			{Kind: EventSchedule, Ref: "refs/heads/main"},
		} {
			w.Matches(ev)
		}
	})
}

// The checked-in seeds named valid-* must parse and broken-* must not, so
// the corpus keeps covering both paths.
func TestFuzzSeeds_ValidParseAndBrokenFail(t *testing.T) {
	files, err := filepath.Glob("testdata/fuzz/FuzzParse/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seeds: %v", err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(raw), "\n", 3)
		if len(lines) < 2 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s: not a fuzz corpus file", file)
		}
		quoted := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
		src, err := strconv.Unquote(quoted)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		_, perr := Parse("seed.yml", []byte(src))
		switch base := filepath.Base(file); {
		case strings.HasPrefix(base, "valid-") && perr != nil:
			t.Errorf("%s: %v", base, perr)
		case strings.HasPrefix(base, "broken-") && perr == nil:
			t.Errorf("%s parsed without error", base)
		}
	}
}
