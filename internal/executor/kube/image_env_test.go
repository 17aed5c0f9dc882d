package kube_test

import (
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/test/kubetest"
)

// TestKube_StepFindsToolsOnTheImagesOwnPATH: an image that puts its tools
// on its own PATH (as golang's puts go in /usr/local/go/bin) runs them by
// name; a step's PATH on kube was once a fixed default that ignored the
// image's environment (`go: not found`, the first thing tried with a Go
// image).
func TestKube_StepFindsToolsOnTheImagesOwnPATH(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec := f.spec(t, runID("ownpath"))
	spec.Image = kubetest.JobOwnPathImage
	s := f.prepare(t, e, spec)
	res, out, err := runStep(t, s, "1", "hello\ngo build ./...\necho \"PATH=$PATH HOME=$HOME\"\n", time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v, %v\n%s", res, err, out)
	}
	for _, want := range []string{"hello from the image's own PATH\n", "go (the image's own, on its PATH): build ./...\n",
		"PATH=/usr/local/go/bin:/opt/t/bin:/usr/bin:/bin HOME=/home/knotless\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
