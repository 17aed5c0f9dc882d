package cli

import (
	"bytes"
	"testing"
)

func TestTermSafe_ControlSequencesAreShownEscapedColoursPass(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"plain", "hello, wörld ✓\n", "hello, wörld ✓\n"},
		{"colour", "\x1b[31mred\x1b[0m \x1b[1;38;5;208mx\x1b[m\n", "\x1b[31mred\x1b[0m \x1b[1;38;5;208mx\x1b[m\n"},
		{"title OSC", "\x1b]0;TITLE\x07", `\x1b]0;TITLE\x07`},
		{"clipboard OSC 52", "\x1b]52;c;ZXZpbA==\x1b\\", `\x1b]52;c;ZXZpbA==\x1b\`},
		{"clear screen", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"cursor up over the footer", "\x1b[1A\x1b[K── step 1/1: x ── succeeded", `\x1b[1A\x1b[K── step 1/1: x ── succeeded`},
		{"private SGR-like", "\x1b[?25l", `\x1b[?25l`},
		{"lone CR overwrites", "failed\rsucceeded\n", `failed\x0dsucceeded` + "\n"},
		{"CR LF passes", "a\r\nb\r\n", "a\r\nb\r\n"},
		{"tab and newline pass", "a\tb\n", "a\tb\n"},
		{"other C0 and DEL", "\x07\x08\x00\x7f", `\x07\x08\x00\x7f`},
		{"C1 CSI in UTF-8", "\u009b31m", `\xc2\x9b31m`},
		{"raw C1 byte", "\x9b2J", `\x9b2J`},
		{"invalid UTF-8", "\xff\xfe", `\xff\xfe`},
		{"ESC at the end", "x\x1b", `x\x1b`},
		{"CR at the end", "x\r", `x\x0d`},
		{"too long SGR", "\x1b[" + string(bytes.Repeat([]byte("1;"), 40)) + "m", `\x1b[` + string(bytes.Repeat([]byte("1;"), 40)) + "m"},
		{"derived workflow name", "esc\x1b]0;TITLE\x07\x1b[31mred", `esc\x1b]0;TITLE\x07` + "\x1b[31mred"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Whole, and one byte per Write: sequences split across writes
			// (a log arriving in pieces) come out the same.
			for _, split := range []bool{false, true} {
				var b bytes.Buffer
				ts := newTermSafe(&b)
				if split {
					for i := 0; i < len(c.in); i++ {
						if n, err := ts.Write([]byte{c.in[i]}); n != 1 || err != nil {
							t.Fatalf("Write = %d, %v", n, err)
						}
					}
				} else if n, err := ts.Write([]byte(c.in)); n != len(c.in) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				ts.Flush()
				if b.String() != c.want {
					t.Errorf("split=%v: got %q, want %q", split, b.String(), c.want)
				}
			}
		})
	}
}
