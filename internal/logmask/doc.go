// Package logmask hides secret values in a stream of log bytes before any
// byte leaves the runner. A Writer replaces every occurrence of each
// masked form of each secret with "***"; a form split across Write calls
// is still caught.
//
// The masked forms of a value V, and of V without its trailing line
// breaks, are:
//
//   - V itself, and each line of a multi-line V (without its "\r");
//   - base64: V encoded in the standard and the URL alphabet, padded and
//     raw, and the part of a longer base64 text that encodes V alone, as
//     `echo "$S" | base64` or `echo "x$S" | base64` prints it;
//   - percent-encoding, each with uppercase and with lowercase hex
//     digits: as a query value (url.QueryEscape, space as '+'), a path
//     segment (url.PathEscape), a whole path ('/' kept, as url.URL.String
//     writes it), a URL's user name or password (https://user:V@host),
//     every byte but the unreserved ones escaped (RFC 3986: curl
//     --data-urlencode), Python's quote(V) ('/' kept), and JavaScript's
//     encodeURIComponent (also jq's @uri);
//   - shell quoting as bash 5 prints it: in single quotes (set -x, `set`,
//     ${V@Q}), in ANSI-C quotes (for a V with a non-printable byte, in
//     the C locale and in a UTF-8 one), with `printf %q` backslashes, and
//     in `declare -p` / `export -p` double quotes; and as dash prints it
//     in `set` and `export -p` (dash's set -x prints V unquoted);
//   - JSON string escaping: encoding/json with and without HTML escaping,
//     the minimal escaping of JSON.stringify and Python's
//     json.dumps(ensure_ascii=False), jq's (DEL as \u007f), ASCII-only
//     escaping (Python's json.dumps, jq -a); and Go's %q.
//
// Quoted forms are masked without the quotes around them, so they are
// found also when V is one piece of a longer quoted word or URL. For
// instance, for the value ab'c"d$ e:
//
//	bash -x          + curl -u 'bob:ab'\''c"d$ e'   + curl -u 'bob:***'
//	bash printf %q   ab\'c\"d\$\ e                  ***
//	bash declare -p  declare -x S="ab'c\"d\$ e"     declare -x S="***"
//	dash export -p   export S='ab'"'"'c"d$ e'       export S='***'
//	JSON             {"s":"ab'c\"d$ e"}             {"s":"***"}
//	URL              https://bob:ab%27c%22d$%20e@h  https://bob:***@h
//
// and for ab'c followed by a newline, bash -x prints $'ab\'c\n', masked
// as $'***'.
//
// Not masked: base64 wrapped over several lines (as base64(1) does past
// 76 columns), hex, a V encoded twice or otherwise transformed (hashed,
// compressed, cut into pieces, upper-cased), percent-encoding with mixed
// hex cases or by an encoder that escapes another set of bytes, and
// quoting by other shells (zsh, ksh) where it differs from the above.
//
// It never emits a byte that might still turn out to belong to a secret:
// it holds back only the shortest tail of the stream that is the start of
// some masked form, so live logs stay live. It never logs, stores or
// returns the secret values it was given, and values shorter than
// MinSecretLen bytes (see TooShort) are not masked at all: callers must
// warn about them instead.
package logmask
