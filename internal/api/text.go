package api

import (
	"fmt"
	"regexp"
	"strconv"
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

// InvisibleRunes are the characters of other categories that show as
// nothing or as a blank that is no space, so that "deploy\u3164" looks
// like "deploy": Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties:
// Other_Default_Ignorable_Code_Point, such as U+3164 HANGUL FILLER, U+115F,
// U+1160, U+FFA0 and U+034F COMBINING GRAPHEME JOINER, and the variation
// selectors U+FE00-FE0F and U+E0100-E01EF, beside the Cf characters
// above), and U+2800 BRAILLE PATTERN BLANK, a symbol whose glyph is empty.
var InvisibleRunes = []*unicode.RangeTable{unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector, brailleBlank}

var brailleBlank = &unicode.RangeTable{R16: []unicode.Range16{{Lo: 0x2800, Hi: 0x2800, Stride: 1}}}

// IsHiddenRune reports whether r is of one of HiddenCategories or one of
// InvisibleRunes: a character a name may not hold, and that text shows
// escaped.
func IsHiddenRune(r rune) bool {
	return unicode.In(r, HiddenCategories...) || unicode.In(r, InvisibleRunes...)
}

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
const TextRule = "names may not hold control or format characters (such as bidirectional overrides and isolates, zero-width characters), line and paragraph separators, or characters that show as nothing (fillers, variation selectors, U+2800 BRAILLE PATTERN BLANK), which make text display as something it is not"

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

// CheckDisplayName is CheckText for a free-text name people tell others by (a
// workflow's or a step's name:), which also may not hold what reads as
// one of VisibleText's escapes: a backslash before x, u or U and hex
// digits, as "deploy\u202e" typed. Shown escaped, a name holding U+202E
// reads the same: refused, an escape in a name is always one.
func CheckDisplayName(what, s string) error {
	if err := CheckText(what, s); err != nil {
		return err
	}
	if at, esc := escapeAt(s); at >= 0 {
		v, _ := strconv.ParseUint(esc[2:], 16, 32)
		hidden := fmt.Sprintf("%U", rune(v))
		if esc[1] == 'x' && v >= 0x80 {
			hidden = fmt.Sprintf("the byte 0x%02x, not valid UTF-8,", v)
		}
		return fmt.Errorf("%s \"%s\": characters %d to %d, %s, read as the escape of a hidden character (shown escaped, a name holding %s reads the same); names may not hold one: drop the backslash, or write the name another way", what, clipName(s), at+1, at+utf8.RuneCountInString(esc), esc, hidden)
	}
	return nil
}

// VisibleText returns s with every character IsHiddenRune and every byte
// that is not valid UTF-8 written as an escape: \x1b for an ASCII control
// and for an invalid byte, \u202e (or \U000e0001) for any other
// character; backslashes stay as they are, so that text shown escaped
// twice (a message that quotes an escaped name) reads the same. A name
// cannot hold what reads as an escape (CheckDisplayName), and git refuses a
// backslash in a ref: there an escape is always one. s itself when it has
// none.
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

// escapeAt returns the character offset (0-based) of the first backslash
// of s that begins what VisibleText could have written for a character it
// escapes (\x1b or \x80-\xff, \u202e, \U000e0001: an ASCII control, an
// invalid byte, an IsHiddenRune character), and that escape as it reads;
// -1 when none. \u00e9 reads as no such escape: VisibleText shows é as é.
func escapeAt(s string) (chars int, esc string) {
	for i, r := range s {
		if r != '\\' {
			continue
		}
		m := escapeLook.FindString(s[i:])
		if m == "" {
			continue
		}
		v, _ := strconv.ParseUint(m[2:], 16, 32)
		if m[1] == 'x' && (v < 0x20 || v >= 0x7f) || m[1] != 'x' && IsHiddenRune(rune(v)) {
			return utf8.RuneCountInString(s[:i]), m
		}
	}
	return -1, ""
}

// escapeLook is what an escape of VisibleText's looks like, at the start
// of a string.
var escapeLook = regexp.MustCompile(`^\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})`)

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
