package api

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/runenames"
)

// The one rule for text people read: names (workflows, steps, runners,
// labels, secrets, repositories, outputs, caches) and the other words
// the pages and the CLI show (refs, commit messages, a runner's version).
// A character that is not shown for what it is can make a name display as
// something else ("trojan source": U+202E RIGHT-TO-LEFT OVERRIDE makes
// "ok\u202Elve" read "okevl"; U+2028 starts a line that is not there).
// Such characters are refused in names at lint, push and API
// (CheckText), and shown escaped wherever text arrives another way
// (VisibleText: log lines, commit messages, branch names).

// HiddenCategories are the Unicode general categories of the characters
// that are not shown for what they are: Cc (controls: C0, DEL, C1), Cf
// (format: the bidirectional overrides, embeddings, isolates and marks,
// zero-width spaces and joiners, the soft hyphen, tags, ...), Zl (line
// separator) and Zp (paragraph separator), by the tables of package
// unicode (unicode.Version).
var HiddenCategories = []*unicode.RangeTable{unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp}

// IsHiddenRune reports whether r is of one of HiddenCategories.
func IsHiddenRune(r rune) bool { return unicode.In(r, HiddenCategories...) }

// HiddenRuneAt returns the byte offset of the first character of s that
// IsHiddenRune, or of the first byte that is not valid UTF-8 (r is then
// utf8.RuneError), and the number of characters before it; i is -1 when
// there is none.
func HiddenRuneAt(s string) (i int, r rune, chars int) {
	for i := 0; i < len(s); chars++ {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 || IsHiddenRune(r) {
			return i, r, chars
		}
		i += size
	}
	return -1, 0, chars
}

// RuneName describes r for a message: "U+202E RIGHT-TO-LEFT OVERRIDE", or
// for a control character without a name, "U+001B (a control character)".
func RuneName(r rune) string {
	name := runenames.Name(r)
	if name == "" || strings.HasPrefix(name, "<") {
		return fmt.Sprintf("%U (a control character)", r)
	}
	return fmt.Sprintf("%U %s", r, name)
}

// TextRule says, for messages, what CheckText refuses.
const TextRule = "names may not hold control or format characters (such as bidirectional overrides and isolates, zero-width characters) or line and paragraph separators, which make text display as something it is not"

// CheckText returns an error when s, a name people read (what says which,
// e.g. "workflow name"), holds a character IsHiddenRune or is not valid
// UTF-8. The error names the character and its position (1-based, in
// characters) and shows s escaped (VisibleText), e.g.
//
//	workflow name "ok\u202eevil": character 3 is U+202E RIGHT-TO-LEFT OVERRIDE; names may not hold ...
func CheckText(what, s string) error {
	i, r, chars := HiddenRuneAt(s)
	if i < 0 {
		return nil
	}
	if r == utf8.RuneError {
		return fmt.Errorf("%s \"%s\": byte %d (0x%02x) is not valid UTF-8; %s", what, clipName(VisibleText(s)), i+1, s[i], TextRule)
	}
	return fmt.Errorf("%s \"%s\": character %d is %s; %s", what, clipName(VisibleText(s)), chars+1, RuneName(r), TextRule)
}

// VisibleText returns s with every character IsHiddenRune and every byte
// that is not valid UTF-8 written as an escape: \x1b for an ASCII control
// and for an invalid byte, \u202e (or \U000e0001) for any other
// character; backslashes stay as they are. s itself when it has none.
func VisibleText(s string) string {
	if i, _, _ := HiddenRuneAt(s); i < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case IsHiddenRune(r):
			b.WriteString(EscapeRune(r))
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// EscapeRune is how VisibleText writes a hidden character r: \x1b for an
// ASCII one, \u202e below U+10000, \U000e0001 above.
func EscapeRune(r rune) string {
	switch {
	case r < 0x80:
		return fmt.Sprintf(`\x%02x`, r)
	case r <= 0xffff:
		return fmt.Sprintf(`\u%04x`, r)
	}
	return fmt.Sprintf(`\U%08x`, r)
}
