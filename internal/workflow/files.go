package workflow

import (
	"fmt"
	"path"
	"strings"

	"knotless.dev/knotless/internal/api"
)

// What a workflow file is, one rule for `knotless workflow lint` (which
// reads a work tree) and the server (which reads a commit's tree): a
// regular file named *.yml or *.yaml directly in .knotless/workflows, a
// real directory (as is .knotless). A symbolic link is never followed:
// neither as the directory (git does not store what it points to, so the
// server would see no workflows where lint sees some) nor as a file (the
// server would read the link's target path as YAML). Both report such an
// entry with the same message instead of ignoring it.

// EntryKind is what a directory entry is, as os.Lstat or git ls-tree says.
type EntryKind int

const (
	KindRegular EntryKind = iota // a regular file (git mode 100644 or 100755)
	KindDir                      // a directory (git tree)
	KindSymlink                  // a symbolic link (git mode 120000)
	KindOther                    // a submodule (git 160000), a device, a socket, ...
)

// ErrSymlink is the message for a workflow file, or a directory on the
// way to them, that is a symbolic link.
const ErrSymlink = "is a symbolic link: workflows must be regular files in .knotless/workflows, itself a real directory"

// IsWorkflowName reports whether a file name (without directory) is one a
// workflow file has: *.yml or *.yaml, in lower case.
func IsWorkflowName(name string) bool {
	ext := path.Ext(name)
	return (ext == ".yml" || ext == ".yaml") && ext != name
}

// wrongCase reports whether name ends in .yml or .yaml in another case
// (CI.YML, x.Yaml): meant as a workflow, and refused as one.
func wrongCase(name string) bool {
	ext := path.Ext(name)
	return ext != name && !IsWorkflowName(name) && (strings.EqualFold(ext, ".yml") || strings.EqualFold(ext, ".yaml"))
}

// CheckDir checks an entry on the way to the workflow files (".knotless"
// or ".knotless/workflows", the path relative to the repository's root):
// an error when it is a symbolic link. Anything else that is not a
// directory simply holds no workflows.
func CheckDir(p string, kind EntryKind) error {
	if kind == KindSymlink {
		return &Error{Path: DisplayPath(p), Line: 1, Col: 1, Msg: ErrSymlink}
	}
	return nil
}

// CheckFile checks an entry in .knotless/workflows (p relative to the
// repository's root, or as lint names it): ok is false when it is no
// workflow file at all (another name, a directory: NotWorkflow says why);
// err says why an entry meant as one is refused: a symbolic link, not a
// regular file, or named *.YML (*.yml in another case), which the server
// would otherwise never run.
func CheckFile(p string, kind EntryKind) (ok bool, err error) {
	base := path.Base(strings.ReplaceAll(p, "\\", "/"))
	if wrongCase(base) && kind != KindDir {
		ext := path.Ext(base)
		return true, &Error{Path: DisplayPath(p), Line: 1, Col: 1, Msg: fmt.Sprintf(
			"will not run: the file name ends in %s, and workflows are files named *.yml or *.yaml, in lower case: rename it to %s",
			DisplayPath(ext), DisplayPath(strings.TrimSuffix(base, ext)+strings.ToLower(ext)))}
	}
	if !IsWorkflowName(base) || kind == KindDir {
		return false, nil
	}
	switch kind {
	case KindRegular:
		return true, nil
	case KindSymlink:
		return true, &Error{Path: DisplayPath(p), Line: 1, Col: 1, Msg: ErrSymlink}
	}
	return true, &Error{Path: DisplayPath(p), Line: 1, Col: 1, Msg: "is not a regular file: workflows must be regular files"}
}

// NotWorkflow says why an entry of .knotless/workflows (p as for
// CheckFile) is not a workflow file and will not run, for the notes of
// `knotless workflow lint` and of a pipeline: no entry there is ignored
// without a word. It is "" for an entry CheckFile takes (ok true).
func NotWorkflow(p string, kind EntryKind) string {
	if ok, _ := CheckFile(p, kind); ok {
		return ""
	}
	base := path.Base(strings.ReplaceAll(p, "\\", "/"))
	ext := path.Ext(base)
	switch {
	case kind == KindDir:
		return "a directory: workflows are the files directly in " + Dir + ", none below it"
	case ext == "":
		return "the file name has no extension: workflows are files named *.yml or *.yaml"
	case ext == base:
		return "the file name is only an extension: workflows are files named *.yml or *.yaml"
	case ext == ".json":
		return "the file name ends in .json: workflows are files named *.yml or *.yaml (YAML reads JSON: rename it to " +
			DisplayPath(strings.TrimSuffix(base, ext)) + ".yml to run it)"
	}
	return "the file name ends in " + DisplayPath(ext) + ": workflows are files named *.yml or *.yaml"
}

// MisplacedDir says why p, a directory directly in .knotless whose name
// is close to workflows (.knotless/workflow, .knotless/Workflows: a typo or
// another case, as `unknown key` suggestions measure it), is never looked
// at, for the notes of a pipeline and of lint; "" for any other directory
// (.knotless/workflows itself, or one of another purpose).
func MisplacedDir(p string) string {
	base, want := path.Base(p), path.Base(Dir)
	if base == want || suggest(base, []string{want}) == "" {
		return ""
	}
	return "a directory that is never looked at: workflows are the files directly in " + Dir + "/ (lower case, with an s); move them there to run them"
}

// GitKind is the EntryKind of a git ls-tree mode.
func GitKind(mode string) EntryKind {
	switch mode {
	case "100644", "100755":
		return KindRegular
	case "040000":
		return KindDir
	case "120000":
		return KindSymlink
	}
	return KindOther
}

// DisplayPath is p with every character a terminal or a page would not
// show for what it is (api.IsHiddenRune: controls, format characters such
// as bidirectional overrides, line separators) and every invalid UTF-8
// byte written as an escape (\x1b, \u202e, ...), so that it is safe to
// print and cannot display as another name; p itself when it has none.
func DisplayPath(p string) string { return api.VisibleText(p) }
