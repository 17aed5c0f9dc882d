package docker_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/testenv"
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

// TestDocker_ExecInAClosedRootCheckoutNamesTheDirectoryNotPermissionDenied:
// `knotless-run exec --executor docker` in a checkout of mode 0700 owned
// by root failed every step with "start /bin/sh: permission denied"; the
// run now ends at once, errored, naming the directory, its owner and
// mode, and what to do.
func TestDocker_ExecInAClosedRootCheckoutNamesTheDirectoryNotPermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "needs root to make a root-owned checkout")
	}
	f := newFixture(t)
	cfg := f.config()
	cfg.Ephemeral = true
	e := f.executor(t, cfg)
	spec, _ := f.spec(t, runID("closed"))
	if err := os.Chmod(spec.Workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := e.Prepare(ctx, spec)
	if err == nil {
		_ = s.Cleanup(ctx)
		t.Fatal("Prepare succeeded in a checkout the job's user cannot enter")
	}
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != api.ReasonExecutor {
		t.Fatalf("error %v, want a Fault with reason executor", err)
	}
	for _, want := range []string{spec.Workspace, "UID 0", "mode 0700", "chmod o+rx"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if left := f.leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
