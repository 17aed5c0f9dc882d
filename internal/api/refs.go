package api

import (
	"fmt"
	"strings"
)

// CheckTriggerRef is the one rule for what `run trigger --ref` names (the
// server applies it, the CLI checks early): a branch or tag by its name
// (main, release/1.2, v1.0) or full ref (refs/heads/..., refs/tags/...),
// never a revision expression (main~5, main^{commit}, HEAD@{1}, A..B) or a
// commit id (that is TriggerInput.SHA). The name follows git
// check-ref-format. "" (the default branch) is fine.
func CheckTriggerRef(ref string) error {
	if ref == "" {
		return nil
	}
	name := ref
	if strings.HasPrefix(ref, "refs/") {
		var ok bool
		if name, ok = strings.CutPrefix(ref, "refs/heads/"); !ok {
			if name, ok = strings.CutPrefix(ref, "refs/tags/"); !ok {
				return fmt.Errorf("ref %q: name a branch or tag (refs/heads/... or refs/tags/...)", clipName(ref))
			}
		}
	}
	if why := badRefName(name); why != "" {
		return fmt.Errorf("ref %q is not a branch or tag name: %s; --ref names an existing branch or tag, not a revision expression (give a commit with --sha)", clipName(ref), why)
	}
	return nil
}

// badRefName says why name is not a valid branch or tag name (git
// check-ref-format), "" when it is.
func badRefName(name string) string {
	switch {
	case name == "" || name == "@":
		return "it is empty"
	case len(name) > 1024:
		return "it is longer than 1024 bytes"
	case strings.HasPrefix(name, "-"):
		return "it starts with -"
	case strings.Contains(name, ".."):
		return `it contains ".."`
	case strings.Contains(name, "@{"):
		return `it contains "@{"`
	case strings.HasSuffix(name, "/") || strings.HasSuffix(name, "."):
		return "it ends with / or ."
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return fmt.Sprintf("it contains %q", c)
		}
	}
	for _, part := range strings.Split(name, "/") {
		switch {
		case part == "":
			return "it contains //"
		case strings.HasPrefix(part, "."):
			return "a part of it starts with ."
		case strings.HasSuffix(part, ".lock"):
			return "a part of it ends with .lock"
		}
	}
	return ""
}

// CheckCommitID checks a full commit id as TriggerInput.SHA takes it: 40
// (SHA-1) or 64 (SHA-256) lowercase hex digits, never abbreviated.
func CheckCommitID(sha string) error {
	ok := len(sha) == 40 || len(sha) == 64
	for i := 0; ok && i < len(sha); i++ {
		c := sha[i]
		ok = c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
	}
	if !ok {
		return fmt.Errorf("commit %q: give the full commit id (40 or 64 lowercase hex digits), not an abbreviation or expression", clipName(sha))
	}
	return nil
}
