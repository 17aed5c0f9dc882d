package logmask

import (
	"encoding/base64"
	"strings"
)

// MinSecretLen is the shortest value, and the shortest derived form, that
// is masked, in bytes. Masking shorter strings would scramble ordinary log
// text ("***" for every "on" or "1") while hiding almost nothing.
const MinSecretLen = 4

// Replacement is what each masked run of bytes becomes.
const Replacement = "***"

// TooShort reports whether secret cannot be masked: it is shorter than
// MinSecretLen bytes or only white space. Such a value is left as is in
// logs; the runner should say so in the run's log (without the value).
func TooShort(secret string) bool {
	return len(secret) < MinSecretLen || strings.TrimSpace(secret) == ""
}

// patterns returns every byte string to mask for the given secrets, each
// at least MinSecretLen bytes long, without duplicates (so a form equal to
// the value is not repeated). These are the forms the package
// documentation lists:
//
//   - the value itself, and the value without trailing line breaks;
//   - for each of those, its base64 encodings in the standard and URL
//     alphabets, padded and raw;
//   - the part of each encoding that does not depend on surrounding bytes
//     when the value sits at byte offset 0, 1 or 2 (mod 3) of a longer
//     encoded text, as in `echo "$SECRET" | base64` or `echo "x$SECRET" |
//     base64` (the first and last one or two characters depend on the
//     neighbours and stay visible);
//   - for each of those two values, also its percent-encodings (percentForms), its
//     quoting by bash and dash (shellForms) and its escaping in JSON and
//     Go string literals (jsonForms), all without the delimiters around
//     them;
//   - each line of a multi-line value (without its "\r").
//
// base64 wrapped over several lines (as base64(1) does past 76 columns)
// is not recognised.
func patterns(secrets []string) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	add := func(s string) {
		if TooShort(s) || seen[s] {
			return
		}
		seen[s] = true
		out = append(out, []byte(s))
	}
	for _, secret := range secrets {
		if TooShort(secret) {
			continue
		}
		values := []string{secret}
		if t := strings.TrimRight(secret, "\r\n"); t != secret {
			values = append(values, t)
		}
		for _, v := range values {
			add(v)
			for _, forms := range [][]string{base64Forms([]byte(v)), percentForms(v), shellForms(v), jsonForms(v)} {
				for _, form := range forms {
					add(form)
				}
			}
		}
		if strings.ContainsAny(secret, "\r\n") {
			for _, line := range strings.Split(secret, "\n") {
				add(strings.TrimSuffix(line, "\r"))
			}
		}
	}
	return out
}

var encodings = []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding}

// base64Forms returns the encodings of v and the stable inner parts of
// its encoding at offsets 0, 1 and 2.
func base64Forms(v []byte) []string {
	var out []string
	for _, enc := range encodings {
		out = append(out, enc.EncodeToString(v))
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := 0; k < 3; k++ {
			buf := make([]byte, k+len(v))
			copy(buf[k:], v)
			e := enc.EncodeToString(buf)
			// Character i encodes bits [6i, 6i+6); v holds bits
			// [8k, 8k+8len(v)). Keep the characters wholly inside.
			lo := (8*k + 5) / 6
			hi := 8 * (k + len(v)) / 6
			if hi-lo >= MinSecretLen {
				out = append(out, e[lo:hi])
			}
		}
	}
	return out
}
