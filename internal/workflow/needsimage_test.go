package workflow

import (
	"strings"
	"testing"
)

// An image (the workflow's or a service's) may take a value a needed run
// exported, written {{ needs.NAME.VAR }}: the decoder keeps it without
// spaces, a matrix value beside it is put in, and the runner's
// ResolveNeedsRefs gives the image the run runs in.
func TestNeedsImage_ReferenceIsKeptAndResolvedFromTheNeededRunsExports(t *testing.T) {
	src := `name: run
needs: [image, db]
matrix: {v: ["1"]}
image: "registry.example.com/app-{{ matrix.v }}@{{ needs.image.DIGEST }}"
services:
  db:
    image: "{{needs.db.REF}}"
steps: [{run: ./app}]
`
	w, err := ParseRun(".knotless/workflows/run.yml", []byte(src), Combo{{Name: "v", Value: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "registry.example.com/app-1@{{needs.image.DIGEST}}"; w.Image != want {
		t.Fatalf("image = %q, want %q", w.Image, want)
	}
	if !HasNeedsRef(w.Image) || HasNeedsRef("golang:1.26") {
		t.Error("HasNeedsRef does not tell an image with a reference from one without")
	}
	ex := NeedsExports{
		"image": {{"DIGEST": "sha256:0123", "OTHER": "x"}},
		"db":    {{"REF": "postgres:16"}},
	}
	if got, err := ResolveNeedsRefs(w.Image, ex); err != nil || got != "registry.example.com/app-1@sha256:0123" {
		t.Errorf("resolved image = %q, %v", got, err)
	}
	if got, err := ResolveNeedsRefs(w.Services[0].Image, ex); err != nil || got != "postgres:16" {
		t.Errorf("resolved service image = %q, %v", got, err)
	}
	for _, img := range []string{"golang:1.26", ""} {
		if got, err := ResolveNeedsRefs(img, nil); err != nil || got != img {
			t.Errorf("an image without a reference (%q) = %q, %v", img, got, err)
		}
	}
}

// A reference that cannot be resolved names itself and why, at push and
// lint (FILE:LINE:COL) or, for what only the needed runs decide, when the
// run starts.
func TestNeedsImage_BadReferenceSaysWhy(t *testing.T) {
	for _, c := range []struct{ image, want string }{
		{`"app@{{ needs.build.DIGEST }}"`, `run.yml:3:8: image uses {{ needs.build.DIGEST }}, but needs: does not name build`},
		{`"app@{{ needs.image.digest-x }}"`, `run.yml:3:8: image: {{ needs.image.digest-x }}: "digest-x" is not a name a run can export`},
		{`"app@{{ needs.image }}"`, `run.yml:3:8: image: {{ needs.image }} names no value`},
	} {
		src := "needs: [image]\nsteps: [{run: x}]\nimage: " + c.image + "\n"
		_, err := Parse(".knotless/workflows/run.yml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("image %s: err = %v, want %q", c.image, err, c.want)
		}
	}

	const img = "app@{{needs.image.DIGEST}}"
	for _, c := range []struct {
		name string
		ex   NeedsExports
		want string
	}{
		{"no run", nil, "this run has no run of image"},
		{"a matrix", NeedsExports{"image": {{"DIGEST": "a"}, {"DIGEST": "b"}}}, "image ran 2 times (a matrix)"},
		{"not exported", NeedsExports{"image": {{"TAG": "1"}}}, "the run of image exported no DIGEST (it exported: TAG;"},
		{"nothing exported", NeedsExports{"image": {{}}}, "exported no DIGEST (it exported: none;"},
		{"a space", NeedsExports{"image": {{"DIGEST": "sha256:1 --privileged"}}}, `which is not an image (one word)`},
	} {
		if got, err := ResolveNeedsRefs(img, c.ex); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q, %v; want an error with %q", c.name, got, err, c.want)
		}
	}
}
