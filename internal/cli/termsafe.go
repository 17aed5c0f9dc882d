package cli

import (
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"golang.org/x/term"

	"knotless.dev/knotless/internal/api"
)

// What the CLI prints on a terminal comes in part from others: a step's
// output, workflow file names, step names, messages. A terminal acts on
// the control characters in it (set the title, the clipboard with OSC 52,
// clear the screen, move the cursor over the real footer). So when stdout
// (or stderr) is a terminal, everything written to it goes through a
// termSafe writer: printable text, newlines, tabs, CR LF and colours (SGR
// sequences, ESC [ digits ; ... m) pass; every other control character,
// escape sequence, C1 control and invalid UTF-8 byte is shown escaped
// (ESC as the four characters \x1b), and so is every character that is
// not shown for what it is (api.IsHiddenRune: a bidirectional override or
// isolate, a zero-width or line separator character: U+202E as \u202e),
// so that no name or line displays as another. `run logs --raw` and any
// output that is not a terminal stay byte-exact.

// maxSGR bounds the length of an SGR sequence that passes as is; a longer
// one is shown escaped.
const maxSGR = 64

// termSafe is a writer that makes what it writes safe on a terminal. It
// keeps an incomplete sequence (an ESC, a CSI, a CR, a partial UTF-8
// character) across writes; Flush writes it out (escaped).
type termSafe struct {
	w       io.Writer
	pending []byte // an incomplete ESC [ ... sequence, CR or UTF-8 character
	out     []byte // scratch
}

func newTermSafe(w io.Writer) *termSafe { return &termSafe{w: w} }

// Write consumes all of p (n is len(p) unless the underlying write fails).
func (t *termSafe) Write(p []byte) (int, error) {
	t.out = t.out[:0]
	for _, b := range p {
		t.feed(b)
	}
	if len(t.out) == 0 {
		return len(p), nil
	}
	if _, err := t.w.Write(t.out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes out an incomplete sequence, escaped.
func (t *termSafe) Flush() error {
	t.out = t.out[:0]
	t.flushPending()
	if len(t.out) == 0 {
		return nil
	}
	_, err := t.w.Write(t.out)
	return err
}

func (t *termSafe) escape(b byte) {
	t.out = fmt.Appendf(t.out, `\x%02x`, b)
}

// flushPending writes the pending bytes out, escaping what must be.
func (t *termSafe) flushPending() {
	p := t.pending
	t.pending = nil
	for len(p) > 0 {
		switch {
		case p[0] == 0x1b || p[0] == '\r':
			t.escape(p[0])
			p = p[1:]
		case p[0] >= 0x80: // an incomplete UTF-8 character
			t.escape(p[0])
			p = p[1:]
		default: // the printable rest of an ESC [ sequence
			t.out = append(t.out, p[0])
			p = p[1:]
		}
	}
}

func (t *termSafe) feed(b byte) {
	if len(t.pending) > 0 {
		switch first := t.pending[0]; {
		case first == '\r':
			t.pending = nil
			if b == '\n' {
				t.out = append(t.out, '\r', '\n')
				return
			}
			t.escape('\r')
		case first == 0x1b:
			if t.feedEscape(b) {
				return
			}
		default: // UTF-8
			if b >= 0x80 && b < 0xc0 {
				t.pending = append(t.pending, b)
				if utf8.FullRune(t.pending) {
					t.emitRune()
				}
				return
			}
			t.flushPending()
		}
	}
	switch {
	case b == 0x1b || b == '\r':
		t.pending = append(t.pending, b)
	case b == '\n' || b == '\t':
		t.out = append(t.out, b)
	case b < 0x20 || b == 0x7f:
		t.escape(b)
	case b < 0x80:
		t.out = append(t.out, b)
	case b >= 0xc2 && b <= 0xf4: // starts a multi-byte character
		t.pending = append(t.pending, b)
	default: // a continuation byte alone, or never valid in UTF-8
		t.escape(b)
	}
}

// emitRune writes the complete UTF-8 character in pending, escaped when it
// is invalid or a C1 control (U+0080–U+009F: U+009B is a CSI to some
// terminals; as its bytes), or another character api.IsHiddenRune (as
// api.EscapeRune writes it).
func (t *termSafe) emitRune() {
	p := t.pending
	t.pending = nil
	r, size := utf8.DecodeRune(p)
	switch {
	case r == utf8.RuneError && size <= 1 || r >= 0x80 && r <= 0x9f:
		for _, b := range p {
			t.escape(b)
		}
	case api.IsHiddenRune(r):
		t.out = append(t.out, api.EscapeRune(r)...)
	default:
		t.out = append(t.out, p...)
	}
}

// feedEscape takes byte b after ESC or ESC [ ...: it reports whether b was
// consumed. An SGR sequence (ESC [ params m) passes whole; anything else
// is flushed escaped and b is handled afresh.
func (t *termSafe) feedEscape(b byte) bool {
	if len(t.pending) == 1 {
		if b == '[' {
			t.pending = append(t.pending, b)
			return true
		}
		t.flushPending()
		return false
	}
	switch {
	case b >= '0' && b <= '9' || b == ';' || b == ':':
		if len(t.pending) >= maxSGR {
			t.flushPending()
			return false
		}
		t.pending = append(t.pending, b)
		return true
	case b == 'm':
		t.out = append(t.out, t.pending...)
		t.out = append(t.out, 'm')
		t.pending = nil
		return true
	}
	// Another CSI (cursor moves, erase, ...) or no CSI at all: shown.
	t.flushPending()
	return false
}

// safeText is s as a terminal shows it through termSafe.
func safeText(s string) string {
	var b []byte
	t := &termSafe{w: writerFunc(func(p []byte) (int, error) { b = append(b, p...); return len(p), nil })}
	io.WriteString(t, s)
	t.Flush()
	return string(b)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// isTerminal reports whether w is a terminal (App.IsTerminal when set).
func (a *App) isTerminal(w io.Writer) bool {
	if a.IsTerminal != nil {
		return a.IsTerminal(w)
	}
	f, ok := w.(*os.File)
	return ok && f != nil && term.IsTerminal(int(f.Fd()))
}
