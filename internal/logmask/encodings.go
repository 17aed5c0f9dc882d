package logmask

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Each function here returns the text a common encoder writes for a value
// v, without the delimiters around it (quotes, "$'", ...): only the part
// that depends on v alone, so that it is found also when v is one piece
// of a longer encoded word, as in a URL or `echo "token=$S"` under set -x.
// Every byte of v is encoded independently of its neighbours, except
// where a comment says otherwise.

// percentEncoders are the ways a value is percent-encoded in a URL, each
// written with uppercase hex digits as these encoders do.
var percentEncoders = []func(string) string{
	// A query parameter, space as '+': url.QueryEscape, url.Values,
	// Python's quote_plus.
	url.QueryEscape,
	// One path segment: url.PathEscape.
	url.PathEscape,
	// A whole path, '/' kept: what url.URL.String writes for Path.
	func(v string) string { return (&url.URL{Path: v}).EscapedPath() },
	// A user name or password in a URL (https://user:pass@host), as
	// url.URL.String writes url.UserPassword.
	func(v string) string { return strings.TrimPrefix(url.UserPassword("", v).String(), ":") },
	// Every byte that is not unreserved (RFC 3986 §2.3), space as %20:
	// curl --data-urlencode, Python's quote(v, safe="").
	func(v string) string { return percentEncode(v, "") },
	// Python's quote(v), which keeps '/'.
	func(v string) string { return percentEncode(v, "/") },
	// JavaScript's encodeURIComponent, jq's @uri.
	func(v string) string { return percentEncode(v, "!'()*") },
}

// percentForms returns v as each percentEncoder writes it, with uppercase
// and with lowercase hex digits.
func percentForms(v string) []string {
	var out []string
	for _, enc := range percentEncoders {
		e := enc(v)
		out = append(out, e, lowerHex(e))
	}
	return out
}

// percentEncode escapes every byte of v but the RFC 3986 unreserved ones
// and those in keep, as %XX with uppercase hex digits.
func percentEncode(v, keep string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if isUnreserved(c) || strings.IndexByte(keep, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.Write([]byte{'%', hex[c>>4], hex[c&15]})
	}
	return b.String()
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// lowerHex turns the two hex digits after each '%' in a percent-encoded
// string to lowercase.
func lowerHex(e string) string {
	b := []byte(e)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = lowerASCII(b[i+1])
			b[i+2] = lowerASCII(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// shellForms returns v as shells quote it in what they print, checked
// against bash 5.2 and dash 0.5.12 by TestWriter_EveryByteQuotedByBashIsMasked
// and TestWriter_SecretPrintedByRealShellsIsMasked:
//
//   - bash's single quotes, where each quote in v closes the quoted
//     string, follows as \' and opens a new one (set -x traces of words
//     and assignments holding a shell metacharacter, `set`, ${v@Q});
//   - dash's single quotes, each run of quotes q as '"q"' (dash's `set`,
//     `export -p`; dash's set -x prints words as they are);
//   - bash's ANSI-C quotes, $'a\nb', in the C locale (every byte past
//     ASCII in octal) and in a UTF-8 one (printable characters as they
//     are): set -x for a word with a non-printable byte and no
//     metacharacter; `printf %q`, `declare -p`, `export -p`, `set`,
//     ${v@Q} for any value with a non-printable byte;
//   - bash's `printf %q` backslashes, with and without the backslash
//     before a leading '#' or '~' (written only at the start of the
//     argument);
//   - bash's double quotes, as `declare -p` and `export -p` write them.
//
// The forms without ANSI-C quoting are made only for values without
// ASCII control bytes: bash uses ANSI-C quoting for those.
func shellForms(v string) []string {
	out := []string{
		strings.ReplaceAll(v, "'", `'\''`),
		dashSingleQuoted(v),
		ansiCQuoted(v, false),
		ansiCQuoted(v, true),
	}
	if !hasControl(v) {
		out = append(out, backslashQuoted(v, true), backslashQuoted(v, false), bashDoubleQuoted(v))
	}
	return out
}

func hasControl(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return true
		}
	}
	return false
}

// dashSingleQuoted is what dash's single_quote writes between its outer
// quotes: each run of quotes q becomes '"q"'. The run boundaries depend
// on the neighbouring bytes only when they are quotes too. A trailing run
// is left without the final "'", which dash writes only when more
// follows.
func dashSingleQuoted(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); {
		if v[i] != '\'' {
			b.WriteByte(v[i])
			i++
			continue
		}
		j := i
		for j < len(v) && v[j] == '\'' {
			j++
		}
		b.WriteString(`'"` + v[i:j] + `"'`)
		i = j
	}
	s := b.String()
	if strings.HasSuffix(v, "'") {
		s = strings.TrimSuffix(s, "'")
	}
	return s
}

// ansiCQuoted is what bash's ansic_quote writes between $' and '. In a
// UTF-8 locale (utf8Locale) a valid character that glibc deems printable
// stays as it is; in the C locale every byte past ASCII is written in
// octal.
func ansiCQuoted(v string, utf8Locale bool) string {
	var b strings.Builder
	for i := 0; i < len(v); {
		c := v[i]
		switch c {
		case '\a', '\b', '\f', '\n', '\r', '\t', '\v', 0x1b, '\\', '\'':
			b.WriteString(ansiCEscapes[c])
			i++
			continue
		}
		if 0x20 <= c && c < 0x7f {
			b.WriteByte(c)
			i++
			continue
		}
		if c >= 0x80 && utf8Locale {
			if r, n := utf8.DecodeRuneInString(v[i:]); n > 1 && glibcPrintable(r) {
				b.WriteString(v[i : i+n])
				i += n
				continue
			}
		}
		fmt.Fprintf(&b, `\%03o`, c)
		i++
	}
	return b.String()
}

var ansiCEscapes = map[byte]string{'\a': `\a`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\v': `\v`, 0x1b: `\E`, '\\': `\\`, '\'': `\'`}

// glibcPrintable approximates glibc's iswprint: every assigned character
// but controls and the line and paragraph separators.
func glibcPrintable(r rune) bool {
	return unicode.IsGraphic(r) || unicode.In(r, unicode.Cf, unicode.Co)
}

// bashBackslashed are the bytes before which bash's `printf %q` writes a
// backslash anywhere in the argument (measured on bash 5.2).
const bashBackslashed = " !\"$&'()*,;<>?[\\]^`{|}"

// backslashQuoted is what bash's `printf %q` writes for a value without
// control bytes. It also escapes '#' and '~' at the start of the argument
// (escapeFirst says whether v is there) and '~' after ':' or '='.
func backslashQuoted(v string, escapeFirst bool) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if strings.IndexByte(bashBackslashed, c) >= 0 ||
			i == 0 && escapeFirst && (c == '#' || c == '~') ||
			i > 0 && c == '~' && (v[i-1] == ':' || v[i-1] == '=') {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// bashDoubleQuoted is what `declare -p` writes between double quotes.
func bashDoubleQuoted(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '"' || c == '\\' || c == '$' || c == '`' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// jsonForms returns v as JSON and Go string literals write it between
// their quotes:
//
//   - encoding/json, with and without HTML escaping (<, >, & as \u003c
//     ...); both also escape U+2028, U+2029 and write invalid UTF-8 as
//     \ufffd;
//   - the minimal escaping of JavaScript's JSON.stringify and Python's
//     json.dumps(ensure_ascii=False): only '"', '\' and control bytes;
//   - the same with DEL as \u007f, as jq writes;
//   - ASCII-only escaping, every non-ASCII character and DEL as \uXXXX
//     (UTF-16 surrogate pairs past U+FFFF): Python's json.dumps, jq -a;
//   - Go's %q (strconv.Quote).
func jsonForms(v string) []string {
	html, _ := json.Marshal(v) // a string always marshals
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	enc.Encode(v) //nolint:errcheck // a string always encodes
	q := strconv.Quote(v)
	return []string{
		unquote(string(html)),
		unquote(strings.TrimSuffix(plain.String(), "\n")),
		jsonEscaped(v, false, false),
		jsonEscaped(v, true, false),
		jsonEscaped(v, true, true),
		unquote(q),
	}
}

func unquote(s string) string { return s[1 : len(s)-1] }

// jsonEscaped escapes '"', '\' and control bytes as JSON requires, the
// usual ones as \b \f \n \r \t; with escapeDEL also DEL; with
// asciiOnly also every non-ASCII character (invalid UTF-8 as \ufffd).
func jsonEscaped(v string, escapeDEL, asciiOnly bool) string {
	const hex = "0123456789abcdef"
	u := func(b *strings.Builder, r rune) {
		b.Write([]byte{'\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15]})
	}
	var b strings.Builder
	for i := 0; i < len(v); {
		c := v[i]
		switch {
		case c == '"' || c == '\\':
			b.Write([]byte{'\\', c})
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f && escapeDEL:
			u(&b, rune(c))
		case c >= 0x80 && asciiOnly:
			r, n := utf8.DecodeRuneInString(v[i:])
			if r1, r2 := utf16.EncodeRune(r); r1 != unicode.ReplacementChar {
				u(&b, r1)
				u(&b, r2)
			} else {
				u(&b, r)
			}
			i += n
			continue
		default:
			b.WriteByte(c)
		}
		i++
	}
	return b.String()
}
