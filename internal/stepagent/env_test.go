package stepagent

import (
	"slices"
	"testing"
)

// TestStepEnv_ImageEnvironmentBeneathTheStepsOwn pins the precedence of a
// step's variables in a container: the image's (PATH among them: an image
// such as golang's puts its tools on its own PATH) beneath the step's own
// (the runner's defaults and the workflow's); HOME and TMPDIR are always
// the agent's writable ones, never the image's. The step that lost `go`
// because its PATH was a fixed default is the failure this pins.
func TestStepEnv_ImageEnvironmentBeneathTheStepsOwn(t *testing.T) {
	a := &Agent{cfg: Config{PATH: "/usr/bin:/bin", Home: "/home/knotless", Tmp: "/tmp",
		Base: ImageBase([]string{"PATH=/usr/local/go/bin:/usr/bin:/bin", "GOPATH=/go", "LANG=de_DE", "HOME=/root", "TMPDIR=/var/tmp", "PWD=/", "SHLVL=1"})}}
	env, path, err := a.stepEnv(map[string][]byte{"LANG": []byte("C.UTF-8"), "CI": []byte("true")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"CI=true", "GOPATH=/go", "LANG=C.UTF-8", "PATH=/usr/local/go/bin:/usr/bin:/bin", "HOME=/home/knotless", "TMPDIR=/tmp"}
	if !slices.Equal(env, want) || path != "/usr/local/go/bin:/usr/bin:/bin" {
		t.Errorf("env %q path %q\nwant %q", env, path, want)
	}
	env, path, _ = a.stepEnv(map[string][]byte{"PATH": []byte("/opt/x")})
	if !slices.Contains(env, "PATH=/opt/x") || path != "/opt/x" {
		t.Errorf("a step's own PATH does not win: %q %q", env, path)
	}
	a.cfg.Base = nil
	if _, path, _ = a.stepEnv(nil); path != "/usr/bin:/bin" {
		t.Errorf("no image environment: PATH %q, want the agent's --path", path)
	}
}

// TestStepEnv_PathAppendGoesAfterTheImagesPath pins --path-append (a
// builder pod's buildctl): the directory comes after the image's PATH, so
// an image's own tools win, and a step that sets PATH keeps its own.
func TestStepEnv_PathAppendGoesAfterTheImagesPath(t *testing.T) {
	a := &Agent{cfg: Config{PATH: "/usr/bin:/bin", PathAppend: "/run/buildkit/bin",
		Base: ImageBase([]string{"PATH=/usr/local/go/bin:/usr/bin"})}}
	env, path, err := a.stepEnv(nil)
	if err != nil || path != "/usr/local/go/bin:/usr/bin:/run/buildkit/bin" || !slices.Contains(env, "PATH="+path) {
		t.Errorf("env %q, path %q, err %v", env, path, err)
	}
	env, path, _ = a.stepEnv(map[string][]byte{"PATH": []byte("/opt/x")})
	if path != "/opt/x" || !slices.Contains(env, "PATH=/opt/x") {
		t.Errorf("a step's own PATH: %q %q", env, path)
	}
}
