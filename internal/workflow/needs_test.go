package workflow

import (
	"sort"
	"strings"
	"testing"
)

// files parses each path → source into the PipelineFile CheckNeeds reads
// (Runs nil for a file that does not parse).
func files(t *testing.T, srcs map[string]string) []PipelineFile {
	t.Helper()
	var out []PipelineFile
	for p, src := range srcs {
		runs, _ := Expand(p, []byte(src))
		out = append(out, PipelineFile{Path: p, Runs: runs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func problemLines(problems map[string]ErrorList) []string {
	var out []string
	for _, list := range problems {
		for _, e := range list {
			out = append(out, e.Error())
		}
	}
	sort.Strings(out)
	return out
}

func TestCheckNeeds_CycleIsRefusedAtEveryEntryOfIt(t *testing.T) {
	fs := files(t, map[string]string{
		"a.yml": "needs: [b]\nsteps: [{run: x}]\n",
		"b.yml": "steps: [{run: x}]\nneeds: [c]\n",
		"c.yml": "needs:\n  - a\nsteps: [{run: x}]\n",
		"d.yml": "needs: [a]\nsteps: [{run: x}]\n",
	})
	problems, resolved := CheckNeeds(fs)
	want := []string{
		`a.yml:1:9: needs "b" makes a cycle (a → b → c → a): a workflow cannot wait for itself`,
		`b.yml:2:9: needs "c" makes a cycle (b → c → a → b): a workflow cannot wait for itself`,
		`c.yml:2:5: needs "a" makes a cycle (c → a → b → c): a workflow cannot wait for itself`,
	}
	if got := problemLines(problems); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if resolved["d.yml"]["a"] != "a.yml" || resolved["a.yml"] != nil {
		t.Errorf("resolved %v: want d's need resolved and none for the files of the cycle", resolved)
	}
}

func TestCheckNeeds_UnknownSelfAmbiguousAndMatrixRunNamesAreErrors(t *testing.T) {
	fs := files(t, map[string]string{
		".knotless/workflows/build.yml":  "name: compile\nsteps: [{run: x}]\n",
		".knotless/workflows/test.yml":   "matrix: {os: [linux, arm]}\nsteps: [{run: x}]\n",
		".knotless/workflows/one.yml":    "name: twin\nsteps: [{run: x}]\n",
		".knotless/workflows/two.yml":    "name: twin\nsteps: [{run: x}]\n",
		".knotless/workflows/deploy.yml": "needs: [compile, build, test, nope, deploy, twin, \"test (linux)\"]\nsteps: [{run: x}]\n",
	})
	problems, resolved := CheckNeeds(fs)
	want := []string{
		`.knotless/workflows/deploy.yml:1:31: needs "nope": no workflow of that name in .knotless/workflows (there are: compile, deploy, test, twin)`,
		`.knotless/workflows/deploy.yml:1:37: needs "deploy" is this workflow itself; a workflow cannot wait for itself`,
		`.knotless/workflows/deploy.yml:1:45: needs "twin" names 2 workflows (one, two); name one by its file name without extension`,
		`.knotless/workflows/deploy.yml:1:51: needs "test (linux)": that is one run of the matrix workflow test; needs names whole workflows (write test: it waits for every run of the matrix)`,
	}
	if got := problemLines(problems); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, ok := resolved[".knotless/workflows/deploy.yml"]; ok {
		t.Errorf("a file with problems has its needs resolved")
	}
}

// A need is found by the workflow's name or its file name, also when the
// file does not parse (its run errors, and the dependent is skipped).
func TestCheckNeeds_ResolvesNamesStemsAndBrokenFiles(t *testing.T) {
	fs := files(t, map[string]string{
		"w/build.yml":  "name: compile\nsteps: [{run: x}]\n",
		"w/lint.yml":   "steps: [{run: x}\n",
		"w/report.yml": "needs: [compile, lint, test]\nsteps: [{run: x}]\n",
		"w/test.yml":   "name: \"t-{{ matrix.v }}\"\nmatrix: {v: [a, b]}\nneeds: [build]\nsteps: [{run: x}]\n",
	})
	problems, resolved := CheckNeeds(fs)
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problemLines(problems))
	}
	got := resolved["w/report.yml"]
	if got["compile"] != "w/build.yml" || got["lint"] != "w/lint.yml" || got["test"] != "w/test.yml" || len(got) != 3 {
		t.Errorf("report's needs resolve to %v", got)
	}
	closure := NeedsClosure(fs, resolved, []string{"w/test.yml"})
	if strings.Join(closure, ",") != "w/build.yml,w/test.yml" {
		t.Errorf("closure of test: %v, want build and test", closure)
	}
}

func TestNeedPaths_AreUnderNeedsDirByNeedAndValues(t *testing.T) {
	if d, v := NeedPaths("build", nil); d != ".knotless/needs/build" || v != ".knotless/needs/build.env" {
		t.Errorf("plain need: %s %s", d, v)
	}
	if d, v := NeedPaths("test", Combo{{"os", "debian/12"}, {"go", "1.26"}}); d != ".knotless/needs/test/debian_12-1.26" || v != ".knotless/needs/test/debian_12-1.26.env" {
		t.Errorf("matrix need: %s %s", d, v)
	}
}
