package workflow

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
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
// workflow file has: *.yml or *.yaml.
func IsWorkflowName(name string) bool {
	ext := path.Ext(name)
	return (ext == ".yml" || ext == ".yaml") && ext != name
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
// workflow file at all (another name, a directory); err says why an entry
// named like one is refused.
func CheckFile(p string, kind EntryKind) (ok bool, err error) {
	if !IsWorkflowName(path.Base(strings.ReplaceAll(p, "\\", "/"))) || kind == KindDir {
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

// unsafeName reports whether s has a control character (C0, DEL, C1) or
// is not valid UTF-8: such a name would drive a terminal that shows it.
func unsafeName(s string) bool {
	return !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0
}

// DisplayPath is p with every control character and invalid UTF-8 byte
// written as an escape (\x1b, \t, ...), so that it is safe to print on a
// terminal and in a log; p itself when it has none.
func DisplayPath(p string) string {
	if !unsafeName(p) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, p[i])
		case unicode.IsControl(r):
			for _, c := range []byte(p[i : i+size]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		default:
			b.WriteString(p[i : i+size])
		}
		i += size
	}
	return b.String()
}
