package workflow

import (
	"fmt"
	"strings"
	"testing"
	"unicode"

	"golang.org/x/text/unicode/rangetable"

	"knotless.dev/knotless/internal/api"
)

// eachHidden calls f with every character of the categories a name may
// not hold (api.HiddenCategories: Cc, Cf, Zl, Zp; api.InvisibleRunes).
func eachHidden(f func(r rune)) {
	rangetable.Visit(rangetable.Merge(append(append([]*unicode.RangeTable{}, api.HiddenCategories...), api.InvisibleRunes...)...), f)
}

// TestLint_BidiOverrideInWorkflowNameIsRefused pins issue 25 item 1 for
// workflows, over whole categories: a workflow name, a step name, a
// runners entry, an outputs path, a cache key and a concurrency group
// holding any control, format (bidirectional overrides and isolates,
// zero-width characters) or separator character are refused at their
// FILE:LINE:COL, naming the character's code point and position, and the
// message itself holds no such character.
func TestLint_BidiOverrideInWorkflowNameIsRefused(t *testing.T) {
	fields := []struct {
		what, line string // line: the YAML with %s for the quoted name
		at         string // where the error points
	}{
		{"workflow name", "name: %s\nsteps: [{run: x}]\n", "ci.yml:1:7: name "},
		{"step name", "steps:\n  - name: %s\n    run: x\n", "ci.yml:2:11: step 1 name"},
		{"runners", "runners: [%s]\nsteps: [{run: x}]\n", "ci.yml:1:11: an entry of runners"},
		{"outputs", "outputs: [%s]\nsteps: [{run: x}]\n", "ci.yml:1:11: an entry of outputs"},
		{"concurrency", "concurrency: %s\nsteps: [{run: x}]\n", "ci.yml:1:14: concurrency group"},
	}
	n := 0
	eachHidden(func(r rune) {
		n++
		quoted := fmt.Sprintf(`"ok\U%08Xevil"`, r)
		for _, f := range fields {
			src := fmt.Sprintf(f.line, quoted)
			_, err := Parse("ci.yml", []byte(src))
			if err == nil {
				t.Errorf("%s with %U: accepted", f.what, r)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, f.at) || !strings.Contains(msg, fmt.Sprintf("character 3 is %U", r)) {
				t.Errorf("%s with %U: %q, want it at %s naming the character", f.what, r, msg, f.at)
			}
			if strings.ContainsRune(msg, r) {
				t.Errorf("%s with %U: the message holds the character itself", f.what, r)
			}
		}
	})
	if n < 200 {
		t.Fatalf("only %d characters tried", n)
	}
	// Written as themselves (not as escapes), format characters are
	// refused the same way.
	for _, r := range []rune{0x202E, 0x2066, 0x200B, 0xFEFF, 0xE0041} {
		src := "name: ok" + string(r) + "evil\nsteps: [{run: x}]\n"
		if _, err := Parse("ci.yml", []byte(src)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%U", r)) {
			t.Errorf("a literal %U in the name: %v", r, err)
		}
	}
	// Positive control: names in any script, with spaces and marks, pass.
	for _, name := range []string{"build ✓", "тест", "ビルド", "é (e + U+0301)", "العربية", "emoji 👩‍💻 no"} {
		if strings.ContainsRune(name, 0x200D) {
			continue // a zero-width joiner is a format character: refused by design
		}
		if _, err := Parse("ci.yml", []byte("name: \""+name+"\"\nsteps: [{name: \""+name+"\", run: x}]\n")); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
}

// TestLint_FileNameWithFormatCharacterIsRefused: the workflow's default
// name comes from its file name, so the file name follows the same rule.
func TestLint_FileNameWithFormatCharacterIsRefused(t *testing.T) {
	eachHidden(func(r rune) {
		_, err := Parse(".knotless/workflows/ok"+string(r)+"lmy.yml", []byte("steps: [{run: x}]\n"))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("character 3 is %U", r)) || strings.ContainsRune(err.Error(), r) {
			t.Errorf("file name with %U: %v", r, err)
		}
	})
}

// A workflow's or step's name typed with what reads as an escape
// (deploy\u202e: a backslash and five characters) is refused at its
// FILE:LINE:COL: shown escaped, a name holding U+202E reads the same.
func TestLint_NameTypedAsAnEscapeIsRefused(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"name: 'deploy\\u202e'\nsteps: [{run: x}]\n", `ci.yml:1:7: name "deploy\u202e": characters 7 to 12, \u202e, read as the escape`},
		{"steps:\n  - name: 'a\\x1b'\n    run: x\n", `ci.yml:2:11: step 1 name "a\x1b": characters 2 to 5, \x1b, read as the escape`},
	} {
		_, err := Parse(".knotless/workflows/ci.yml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.src, err, c.want)
		}
	}
	if _, err := Parse(".knotless/workflows/ci.yml", []byte("name: 'C:\\dir'\nsteps: [{name: 'printf a\\n', run: x}]\n")); err != nil {
		t.Errorf("backslashes that read as no escape: %v", err)
	}
}
