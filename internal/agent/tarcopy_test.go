package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// confined must refuse by itself what os.Root refuses on Linux: under
// gVisor, os.Root follows a symbolic link to a directory on the way
// (openat with O_NOFOLLOW|O_DIRECTORY follows it there), so a copy of
// escape/etc/passwd (escape -> /) would leave the workspace. Links that
// stay inside are followed; a link as the last element is not (it is
// copied as a link); what does not exist is left to the copy.
func TestConfined_LinkOnTheWayOutOfTheWorkspaceRefusedWithoutOSRoot(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "real.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"escape": "/", "up": "../..", "inner": "sub", "chain": "inner", "loop": "loop",
		"sub/deeper/back": "../../..", "sub/deeper/sibling": "../real.txt", "viaup": "sub/deeper/../../escape",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for name, want := range map[string]string{
		"escape/etc/passwd":         "escapes from the workspace through the symbolic link escape -> /",
		"up/x":                      "leaves the workspace",
		"sub/deeper/back/etc/x":     "leaves the workspace",
		"viaup/etc/passwd":          "escapes from the workspace",
		"loop/x":                    "too many levels of symbolic links",
		"inner/real.txt":            "",
		"chain/real.txt":            "",
		"sub/deeper/../real.txt":    "",
		"escape":                    "",
		"sub/deeper/sibling":        "",
		"missing/dir/x":             "",
		"sub/real.txt/not-a-dir/x":  "",
		"inner/deeper/../real.txt":  "",
		"./inner/./deeper/../../up": "",
	} {
		err := confined(root, name)
		switch {
		case want == "" && err != nil:
			t.Errorf("confined(%q) = %v, want nil", name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("confined(%q) = %v, want an error saying %q", name, err, want)
		}
	}
	if _, _, _, err := ResolveIn(dir, "escape/etc/passwd"); err == nil {
		t.Error("ResolveIn of a path through escape -> / succeeded")
	}
	tr, name, closeTree, err := ResolveIn(dir, "inner/real.txt")
	if err != nil {
		t.Fatalf("ResolveIn through a link inside the workspace: %v", err)
	}
	defer closeTree()
	if fi, err := tr.Lstat(name); err != nil || fi.Size() != 1 {
		t.Errorf("Lstat of inner/real.txt: %v %v", fi, err)
	}
}
