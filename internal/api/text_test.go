package api

import (
	"bufio"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/rangetable"
)

// TestCheckText_EveryControlFormatAndSeparatorCharacterIsRefused pins
// issue 25 item 1 over whole Unicode categories: every character of Cc,
// Cf, Zl and Zp, and every one of InvisibleRunes, in a name is refused
// with its code point and position, and every other character of the
// other categories (letters, marks, numbers, punctuation, symbols, spaces)
// passes.
func TestCheckText_EveryControlFormatAndSeparatorCharacterIsRefused(t *testing.T) {
	refused := 0
	rangetable.Visit(rangetable.Merge(append(slices.Clone(HiddenCategories), InvisibleRunes...)...), func(r rune) {
		refused++
		err := CheckText("workflow name", "ok"+string(r)+"evil")
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("character 3 is %U", r)) {
			t.Errorf("CheckText(ok %U evil) = %v, want the character and its position named", r, err)
		}
		if err != nil && strings.ContainsRune(err.Error(), r) {
			t.Errorf("the message about %U holds the character itself: %q", r, err)
		}
		if v := VisibleText("a" + string(r)); v != "a"+EscapeRune(r) {
			t.Errorf("VisibleText(a %U) = %q, want it escaped", r, v)
		}
	})
	if refused < 200 { // 65 controls, 170 format characters (Unicode 15), 2 separators
		t.Fatalf("only %d characters checked: the category tables are not being read", refused)
	}
	passed := 0
	rangetable.Visit(rangetable.Merge(unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs), func(r rune) {
		if unicode.In(r, InvisibleRunes...) {
			return
		}
		passed++
		if err := CheckText("step name", "a"+string(r)); err != nil {
			t.Errorf("CheckText(a %U) = %v, want nil (category %s shows as itself)", r, err, category(r))
		}
	})
	if passed < 100000 {
		t.Fatalf("only %d characters of shown categories checked", passed)
	}
}

func category(r rune) string {
	for name, t := range unicode.Categories {
		if len(name) == 2 && unicode.Is(t, r) {
			return name
		}
	}
	return "?"
}

func TestCheckText_InvalidUTF8IsRefusedNamingTheByte(t *testing.T) {
	err := CheckText("step name", "ab\xffc")
	if err == nil || !strings.Contains(err.Error(), "byte 3 (0xff) is not valid UTF-8") || !utf8.ValidString(err.Error()) {
		t.Fatalf("CheckText(invalid UTF-8) = %v", err)
	}
}

func TestCheckText_MessageNamesTheCharacter(t *testing.T) {
	err := CheckText("workflow name", "ok\u202Eevil")
	want := `workflow name "ok\u202eevil": character 3 is U+202E RIGHT-TO-LEFT OVERRIDE; ` + TextRule
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if got := RuneName(0x1b); got != "U+001B (a control character)" {
		t.Errorf("RuneName(ESC) = %q", got)
	}
}

// Names that show nothing, by an oracle that is not this package's table:
// every code point Perl's Unicode database (the perl every git needs, its
// own copy of DerivedCoreProperties) calls Default_Ignorable_Code_Point is
// refused in a name and shown escaped, and so are the characters of issue
// 39 that look like nothing: U+3164 HANGUL FILLER, U+115F, U+1160, U+FFA0,
// U+034F COMBINING GRAPHEME JOINER, the variation selectors and U+2800
// BRAILLE PATTERN BLANK. (Before, "deploy\u3164" and "deploy" were two
// names that looked the same.)
func TestCheckText_CharactersThatShowNothingAreRefused(t *testing.T) {
	for _, r := range []rune{0x3164, 0x115F, 0x1160, 0xFFA0, 0x034F, 0xFE00, 0xFE0F, 0xE0100, 0xE01EF, 0x2800} {
		if err := CheckText("workflow name", "deploy"+string(r)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("character 7 is %U", r)) {
			t.Errorf("CheckText(deploy %U) = %v, want it refused, naming the character", r, err)
		}
		if v := VisibleText("deploy" + string(r)); v != "deploy"+EscapeRune(r) {
			t.Errorf("VisibleText(deploy %U) = %q, want it escaped", r, v)
		}
	}
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Fatalf("perl (which git depends on) is the oracle: %v", err)
	}
	out, err := exec.Command(perl, "-e", `for (0..0x10FFFF) { next if $_ >= 0xD800 && $_ <= 0xDFFF; print "$_\n" if chr($_) =~ /\p{Default_Ignorable_Code_Point}/ }`).Output()
	if err != nil {
		t.Fatalf("perl: %v", err)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		v, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		n++
		if r := rune(v); !IsHiddenRune(r) {
			t.Errorf("%U is Default_Ignorable_Code_Point (Perl's Unicode database) and IsHiddenRune says it shows", r)
		}
	}
	// Unicode 14 and 15 have 4,174 of them (most in reserved ranges).
	if n < 4000 {
		t.Fatalf("perl named only %d default-ignorable code points: the oracle is not being read", n)
	}
}

// An escape in a name is never mistaken for the same characters typed:
// VisibleText shows a name holding U+202E as deploy\u202e, so a name
// typed as deploy\u202e (a backslash and five letters) is refused
// (CheckDisplayName), naming the characters; backslashes that read as no escape
// pass, and VisibleText applied twice reads as once.
func TestCheckDisplayName_RefusesWhatReadsAsAnEscape(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{`deploy\u202e`, `characters 7 to 12, \u202e, read as the escape of a hidden character (shown escaped, a name holding U+202E reads the same)`},
		{`a\x1bb`, `characters 2 to 5, \x1b,`},
		{`bad\xffbyte`, `a name holding the byte 0xff, not valid UTF-8, reads the same`},
		{`tag\U000e0001`, `characters 4 to 13, \U000e0001,`},
	} {
		if err := CheckDisplayName("step name", c.name); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckDisplayName(%q) = %v, want %q", c.name, err, c.want)
		}
		if err := CheckText("an entry of command", c.name); err != nil {
			t.Errorf("CheckText(%q) = %v: text that is no name may hold it", c.name, err)
		}
	}
	for _, ok := range []string{"plain name", `printf 'a\n'`, `C:\dir`, `trailing\`, `\uzzzz`, `caf\u00e9`, `C:\users\x41`, `a \U0001F600 b`} {
		if err := CheckDisplayName("step name", ok); err != nil {
			t.Errorf("CheckDisplayName(%q) = %v, want nil (nothing in it reads as an escape VisibleText writes)", ok, err)
		}
	}
	if once := VisibleText("ok\u202e"); VisibleText(once) != once || once != `ok\u202e` {
		t.Errorf("VisibleText: %q once, %q twice", once, VisibleText(once))
	}
}
