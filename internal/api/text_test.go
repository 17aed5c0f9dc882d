package api

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// eachRune calls f with every code point of the range tables.
func eachRune(tables []*unicode.RangeTable, f func(r rune)) {
	for _, t := range tables {
		for _, r16 := range t.R16 {
			for r := rune(r16.Lo); r <= rune(r16.Hi); r += rune(r16.Stride) {
				f(r)
			}
		}
		for _, r32 := range t.R32 {
			for r := rune(r32.Lo); r <= rune(r32.Hi); r += rune(r32.Stride) {
				f(r)
			}
		}
	}
}

// TestCheckText_EveryControlFormatAndSeparatorCharacterIsRefused pins
// issue 25 item 1 over whole Unicode categories: every character of Cc,
// Cf, Zl and Zp in a name is refused with its code point and position,
// and every character of the other categories (letters, marks, numbers,
// punctuation, symbols, spaces) passes.
func TestCheckText_EveryControlFormatAndSeparatorCharacterIsRefused(t *testing.T) {
	refused := 0
	eachRune([]*unicode.RangeTable{unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp}, func(r rune) {
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
	eachRune([]*unicode.RangeTable{unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs}, func(r rune) {
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
