package workflow

import (
	"strings"
	"testing"
)

func TestCheckFile_OneRuleForWhatAWorkflowFileIs(t *testing.T) {
	for _, c := range []struct {
		path    string
		kind    EntryKind
		ok      bool
		errPart string
	}{
		{".knotless/workflows/ci.yml", KindRegular, true, ""},
		{".knotless/workflows/ci.yaml", KindRegular, true, ""},
		{".knotless/workflows/notes.txt", KindRegular, false, ""},
		{".knotless/workflows/.yml", KindRegular, false, ""},
		{".knotless/workflows/sub.yml", KindDir, false, ""},
		{".knotless/workflows/ci.yml", KindSymlink, true, "is a symbolic link: workflows must be regular files"},
		{".knotless/workflows/ci.yml", KindOther, true, "is not a regular file"},
		{".knotless/workflows/CI.YML", KindRegular, true, "will not run: the file name ends in .YML"},
		{".knotless/workflows/ci.Yaml", KindSymlink, true, "will not run: the file name ends in .Yaml"},
		{".knotless/workflows/CI.YML", KindDir, false, ""},
	} {
		ok, err := CheckFile(c.path, c.kind)
		if ok != c.ok || (err == nil) != (c.errPart == "") || err != nil && !strings.Contains(err.Error(), c.path+":1:1: "+c.errPart) {
			t.Errorf("CheckFile(%q, %v) = %v, %v", c.path, c.kind, ok, err)
		}
	}
	for p, want := range map[string]string{
		".knotless/workflows/x.yaml.bak": "ends in .bak",
		".knotless/workflows/c.json":     "rename it to c.yml",
		".knotless/workflows/README":     "no extension",
		".knotless/workflows/.yml":       "only an extension",
		".knotless/workflows/ci.yml":     "",
		".knotless/workflows/CI.YML":     "", // refused by CheckFile instead
	} {
		if got := NotWorkflow(p, KindRegular); (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("NotWorkflow(%q) = %q, want %q", p, got, want)
		}
	}
	if got := NotWorkflow(".knotless/workflows/sub", KindDir); !strings.Contains(got, "a directory") {
		t.Errorf("NotWorkflow(a directory) = %q", got)
	}
	if err := CheckDir(".knotless/workflows", KindSymlink); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("CheckDir of a symlink: %v", err)
	}
	for _, k := range []EntryKind{KindDir, KindRegular, KindOther} {
		if err := CheckDir(".knotless", k); err != nil {
			t.Errorf("CheckDir(%v): %v", k, err)
		}
	}
	for mode, want := range map[string]EntryKind{"100644": KindRegular, "100755": KindRegular, "120000": KindSymlink, "040000": KindDir, "160000": KindOther} {
		if got := GitKind(mode); got != want {
			t.Errorf("GitKind(%s) = %v, want %v", mode, got, want)
		}
	}
}

// A derived name is checked like an explicit one: a file name with a
// control character is refused, and named escaped.
func TestParse_FileNameWithControlCharacterIsRefusedLikeAName(t *testing.T) {
	src := []byte("steps:\n  - run: echo hi\n")
	for _, name := range []string{"esc\x1b]0;TITLE\a\x1b[31mred.yml", "tab\there.yml", "c1\u009b.yml", "bad\xff.yml"} {
		_, err := Parse(".knotless/workflows/"+name, src)
		if err == nil || !strings.Contains(err.Error(), "the file name") || !strings.Contains(err.Error(), "rename the file") ||
			strings.ContainsAny(err.Error(), "\x1b\a\t\u009b\xff") {
			t.Errorf("Parse(%q): %v", name, err)
		}
	}
	if _, err := Parse(".knotless/workflows/ünïcode ok.yml", src); err != nil {
		t.Errorf("a printable file name: %v", err)
	}
	if got := DisplayPath("a\x1b[2Jb\xffc\u0085"); got != `a\x1b[2Jb\xffc\u0085` {
		t.Errorf("DisplayPath = %q", got)
	}
}
