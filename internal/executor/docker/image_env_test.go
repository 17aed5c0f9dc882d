package docker_test

import (
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/test/dockertest"
)

// TestDocker_StepFindsToolsOnTheImagesOwnPATH: an image that puts its
// tools on its own PATH (as golang's puts go in /usr/local/go/bin) runs
// them by name; a step's PATH was once a fixed default that ignored the
// image (`hello: not found`). The step's own PATH still wins.
func TestDocker_StepFindsToolsOnTheImagesOwnPATH(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("ownpath"))
	spec.Image = dockertest.OwnPathImage
	s := f.prepare(t, e, spec)
	res, out, err := runStep(t, s, executor.Step{ID: "1", Script: "hello\ngo build ./...\necho \"PATH=$PATH HOME=$HOME\"\n"}, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v, %v\n%s", res, err, out)
	}
	for _, want := range []string{"hello from the image's own PATH\n", "go (the image's own, on its PATH): build ./...\n",
		"PATH=/usr/local/go/bin:/opt/t/bin:/usr/bin:/bin HOME=/home/knotless\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	res, out, err = runStep(t, s, executor.Step{ID: "2", Script: "echo \"PATH=$PATH\"\n", Env: map[string]string{"PATH": "/bin"}}, time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "PATH=/bin\n" {
		t.Errorf("a step's own PATH: %+v, %v, %q", res, err, out)
	}
}
