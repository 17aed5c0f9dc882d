package api

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/rangetable"
)

// TestCheckText_EveryControlFormatAndSeparatorCharacterIsRefused pins
// issue 25 item 1 over whole Unicode categories: every character of Cc,
// Cf, Zl and Zp in a name is refused with its code point and position,
// and every character of the other categories (letters, marks, numbers,
// punctuation, symbols, spaces) passes.
func TestCheckText_EveryControlFormatAndSeparatorCharacterIsRefused(t *testing.T) {
	refused := 0
	rangetable.Visit(rangetable.Merge(HiddenCategories...), func(r rune) {
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
