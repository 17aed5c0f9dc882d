package api

import (
	"fmt"
	"strings"
)

// MaxNameLength is the longest account handle or repository name, in bytes.
const MaxNameLength = 100

// NameRule says, for messages, what CheckName accepts.
const NameRule = "1-100 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit, not ending in .git"

// CheckName is the one rule for the names that become directories on the
// server (DATA/repos/OWNER/NAME.git) and on runners
// (WORK/mirrors/OWNER/NAME.git): account handles and repository names. A
// name is 1 to MaxNameLength bytes of A-Z, a-z, 0-9, '.', '_' and '-'; it
// starts with a letter or digit (so it is never "." or "..", never hidden,
// never taken for a command-line option) and does not end in ".git" (in
// any case: "NAME.git" is the repository's directory). The error names
// what (e.g. "repository name") and the rule.
func CheckName(what, name string) error {
	ok := len(name) >= 1 && len(name) <= MaxNameLength && isAlnum(name[0]) &&
		!strings.HasSuffix(strings.ToLower(name), ".git")
	for i := 1; ok && i < len(name); i++ {
		c := name[i]
		ok = isAlnum(c) || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%s %q: use %s", what, clipName(name), NameRule)
	}
	return nil
}

// CheckHandle is CheckName for an account handle, which is also lowercase
// (so that "Alice" and "alice" are not two accounts).
func CheckHandle(handle string) error {
	if err := CheckName("handle", handle); err != nil {
		return err
	}
	if strings.ToLower(handle) != handle {
		return fmt.Errorf("handle %q: use lowercase letters (%s)", handle, NameRule)
	}
	return nil
}

// CheckRepo checks "OWNER/NAME": a handle, a slash and a repository name.
func CheckRepo(full string) error {
	owner, name, ok := strings.Cut(full, "/")
	if !ok {
		return fmt.Errorf("repository %q: want OWNER/NAME", clipName(full))
	}
	if err := CheckHandle(owner); err != nil {
		return fmt.Errorf("repository %q: owner %w", clipName(full), err)
	}
	if err := CheckName("name", name); err != nil {
		return fmt.Errorf("repository %q: %w", clipName(full), err)
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// clipName keeps a refused name short in a message.
func clipName(s string) string {
	if len(s) <= 2*MaxNameLength {
		return s
	}
	return s[:2*MaxNameLength] + "..."
}

// MaxRunnerNameLength is the longest runner name or label, in bytes: it
// must fit a Kubernetes label value.
const MaxRunnerNameLength = 63

// CheckRunnerName is CheckName for a runner's name or one of its labels
// (what says which), at most MaxRunnerNameLength bytes: runner names
// become label values, file names and command-line arguments.
func CheckRunnerName(what, name string) error {
	if err := CheckName(what, name); err != nil {
		return err
	}
	if len(name) > MaxRunnerNameLength {
		return fmt.Errorf("%s %q: at most %d characters (%s)", what, clipName(name), MaxRunnerNameLength, NameRule)
	}
	return nil
}
