package logmask

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/testenv"
)

func TestWriter_URLEncodedSecretInURLIsMasked(t *testing.T) {
	secret := "p@ss w/rd:x+y?&=#%é'"
	u := url.URL{
		Scheme:   "https",
		User:     url.UserPassword("bob", secret),
		Host:     "example.com",
		Path:     "/repo/" + secret,
		RawQuery: url.Values{"token": {secret}}.Encode(),
	}
	for _, tc := range []struct{ name, input, want string }{
		{"URLString", u.String(), "https://bob:***@example.com/repo/***?token=***"},
		{"LowercaseHex", lowerHex(u.String()), "https://bob:***@example.com/repo/***?token=***"},
		{"PathEscape", "GET /v1/secrets/" + url.PathEscape(secret) + " 200", "GET /v1/secrets/*** 200"},
		// curl --data-urlencode, Python quote(s, safe="").
		{"EveryReservedByte", "t=p%40ss%20w%2Frd%3Ax%2By%3F%26%3D%23%25%C3%A9%27&", "t=***&"},
		{"EveryReservedByteLowercase", "t=p%40ss%20w%2frd%3ax%2by%3f%26%3d%23%25%c3%a9%27&", "t=***&"},
		{"PythonQuote", "/p%40ss%20w/rd%3Ax%2By%3F%26%3D%23%25%C3%A9%27/", "/***/"},
		{"EncodeURIComponent", "?t=p%40ss%20w%2Frd%3Ax%2By%3F%26%3D%23%25%C3%A9'", "?t=***"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkEverySplit(t, []string{secret}, tc.input, tc.want)
		})
	}
}

func TestWriter_BashXQuotedSecretIsMasked(t *testing.T) {
	for _, tc := range []struct{ name, secret, input, want string }{
		// bash -x single-quotes a word with a metacharacter, each
		// embedded quote as '\''; the word holds more than the secret.
		{"SingleQuotes", "ab'cd ef", "+ curl -u 'bob:ab'\\''cd ef' https://x\n", "+ curl -u 'bob:***' https://x\n"},
		{"LeadingAndTrailingQuote", "'abcd'", "+ echo ''\\''abcd'\\'''\n", "+ echo '***'\n"},
		{"NewlineInSingleQuotes", "line1\nline2'x", "+ echo 'line1\nline2'\\''x'\n", "+ echo '***'\n"},
		// A word with a non-printable byte and no metacharacter: $'...'.
		{"ANSICQuotes", "ab\x01cd\xff", "+ echo $'ab\\001cd\\377'\n", "+ echo $'***'\n"},
		{"ANSICQuotesUTF8Locale", "ab\x1bé\\", "+ echo $'ab\\Eé\\\\'\n", "+ echo $'***'\n"},
		{"ANSICQuotesCLocale", "ab\x1bé\\", "+ echo $'ab\\E\\303\\251\\\\'\n", "+ echo $'***'\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkEverySplit(t, []string{tc.secret}, tc.input, tc.want)
		})
	}
}

func TestWriter_PrintfQuotedSecretIsMasked(t *testing.T) {
	for _, tc := range []struct{ name, secret, input, want string }{
		{"Backslashes", `it's a "pw"`, `it\'s\ a\ \"pw\"` + "\n", "***\n"},
		{"LeadingTilde", "~home-dir", `\~home-dir` + "\n", "***\n"},
		{"TildeAfterEquals", "~home-dir", `HOME=\~home-dir` + "\n", "HOME=***\n"},
		{"LeadingHash", "#hash-tag", `\#hash-tag ` + `x\#hash-tag`, "*** x***"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkEverySplit(t, []string{tc.secret}, tc.input, tc.want)
		})
	}
}

func TestWriter_DeclarePSecretIsMasked(t *testing.T) {
	checkEverySplit(t, []string{"a\"b$c\\d`e"}, "declare -x S=\"a\\\"b\\$c\\\\d\\`e\"\n", "declare -x S=\"***\"\n")
}

func TestWriter_DashSetSecretIsMasked(t *testing.T) {
	checkEverySplit(t, []string{"ab'cd'"}, `S='ab'"'"'cd'"'"`+"\n", "S='***\n")
	checkEverySplit(t, []string{"a''b-cd"}, `S='a'"''"'b-cd'`+"\n", "S='***'\n")
}

func TestWriter_JSONEscapedSecretIsMasked(t *testing.T) {
	secret := "p\"w\\<&>\n\té\u2028/\x7f"
	html, _ := json.Marshal(map[string]string{"token": secret})
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(map[string]string{"token": secret})
	for _, tc := range []struct{ name, input, want string }{
		{"EncodingJSON", string(html), `{"token":"***"}`},
		{"EncodingJSONWithoutHTMLEscaping", plain.String(), "{\n  \"token\": \"***\"\n}\n"},
		{"GoQuoted", fmt.Sprintf("bad token %q", secret), `bad token "***"`},
		// JSON.stringify, Python's json.dumps(ensure_ascii=False).
		{"MinimalEscaping", "\"p\\\"w\\\\<&>\\n\\té\u2028/\x7f\"", `"***"`},
		{"JQ", `"p\"w\\<&>\n\té` + "\u2028" + `/\u007f"`, `"***"`},
		// Python's json.dumps, jq -a.
		{"ASCIIOnly", `"p\"w\\<&>\n\t\u00e9\u2028/\u007f"`, `"***"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkEverySplit(t, []string{secret}, tc.input, tc.want)
		})
	}
}

// No encoded form is shorter than MinSecretLen, even for the shortest
// value that is masked.
func TestPatterns_NoneShorterThanMinSecretLen(t *testing.T) {
	for _, s := range []string{"abcd", "a'b\n", "\x00\x01\x02\x03", "    x", "é€"} {
		for _, p := range patterns([]string{s}) {
			if len(p) < MinSecretLen {
				t.Errorf("secret %q: pattern %q is shorter than %d bytes", s, p, MinSecretLen)
			}
		}
	}
}

// shellSecrets are values that shells quote in every way they know. Each
// is made of chunks like "Qz1k" (uppercase, lowercase, digit, lowercase)
// around the tricky bytes: a chunk left in masked output is a leak.
var shellSecrets = []struct{ name, value string }{
	{"SingleQuote", "Qz1k'Wx2m"},
	{"DoubleQuoteBackslashDollarBacktick", "Qz1k\"Wx2m\\Vy3n$Ru4p`Ts5q"},
	{"SpacesAndMetacharacters", "Qz1k Wx2m!Vy3n&Ru4p;(Ts5q)|Po6r*"},
	{"NewlineAndTab", "Qz1k\nWx2m\tVy3n"},
	{"NonUTF8", "\xffQz1k\xfeWx2m\x80"},
	{"LeadingDash", "-Qz1k'Wx2m"},
	{"LeadingHashTildeAfterColon", "#Qz1k~Wx2m:~Vy3n"},
	{"LeadingTilde", "~Qz1k Wx2m"},
	{"UTF8", "Qz1kéWx2m€Vy3n😀Ru4p"},
	{"ControlBytes", "Qz1k\x01Wx2m\x1bVy3n\x7fRu4p\rTs5q"},
	{"QuotesAtBothEnds", "'Qz1k''Wx2m'"},
	{"UnicodeEdgeCases", "Qz1k\u00a0Wx2m\u200bVy3n\u2028Ru4p\u0085Ts5q"},
	{"Everything", "-Qz1k'Wx2m\"Vy3n\\Ru4p$Ts5q`Po6r Mn7s\tLk8t\nJh9u\xffGf0vé"},
}

var chunkRE = regexp.MustCompile(`[A-Z][a-z][0-9][a-z]`)

// q is a masked word in any quoting a shell prints: ***, '***', "***",
// $'***', or '*** (dash leaves a trailing quote run unclosed).
const q = `(?:\$?'|")?\*\*\*(?:'|")?`

// shellLocales are the locales to run shells in: C, and C.UTF-8 when the
// machine has it.
func shellLocales(t *testing.T) []string {
	t.Helper()
	locales := []string{"C"}
	cmd := exec.Command("bash", "-c", `printf %q é`)
	cmd.Env = []string{"LC_ALL=C.UTF-8"}
	if out, err := cmd.CombinedOutput(); err == nil && string(out) == "é" {
		locales = append(locales, "C.UTF-8")
	}
	return locales
}

// runShell runs a shell with env and returns what it wrote to stdout
// and stderr, in the order it wrote it.
func runShell(t *testing.T, env []string, shell string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(shell, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %q: %v\n%s", shell, args, err, out.Bytes())
	}
	return out.Bytes()
}

// What a step's shell prints with a secret in it, in bash and dash, in
// the C and a UTF-8 locale: no chunk of the secret is left, and where the
// shape of the line is known, "***" stands where the secret was.
func TestWriter_SecretPrintedByRealShellsIsMasked(t *testing.T) {
	for _, sh := range []string{"bash", "dash"} {
		testenv.LookPath(t, sh, sh)
	}
	scripts := []struct {
		shell string
		args  []string
		want  string // regexp the masked output must match, if not ""
	}{
		{"bash", []string{"-xc", `: "$S"`}, `^\+ : ` + q + `\n$`},
		{"bash", []string{"-xc", `: "x${S}y"`}, `^\+ : (?:\$?')?x\*\*\*y'?\n$`},
		{"bash", []string{"-xc", `T=$S`}, `^\+ T=` + q + `\n$`},
		{"bash", []string{"-xc", `[[ $S == x ]] || :`}, ""},
		{"bash", []string{"-c", `printf '%q\n' "$S"`}, `^` + q + `\n$`},
		{"bash", []string{"-c", `printf '%q\n' "t=$S"`}, `^(?:\$')?t=\*\*\*'?\n$`},
		{"bash", []string{"-c", `declare -p S`}, `^declare -x S=` + q + `\n$`},
		{"bash", []string{"-c", `echo "${S@Q}"`}, `^` + q + `\n$`},
		{"bash", []string{"-c", `export -p`}, `(?m)^declare -x S=` + q + `$`},
		{"bash", []string{"--posix", "-c", `export -p`}, `(?m)^export S=` + q + `$`},
		{"bash", []string{"-c", `set`}, `(?m)^S=` + q + `$`},
		{"dash", []string{"-xc", `: "$S"`}, `^\+ : \*\*\*\n$`},
		{"dash", []string{"-c", `export -p`}, `(?m)^export S=` + q + `$`},
		{"dash", []string{"-c", `set`}, `(?m)^S=` + q + `$`},
	}
	for _, locale := range shellLocales(t) {
		for _, s := range shellSecrets {
			t.Run(locale+"/"+s.name, func(t *testing.T) {
				for _, sc := range scripts {
					raw := runShell(t, []string{"S=" + s.value, "LC_ALL=" + locale}, sc.shell, sc.args...)
					got := streamMask(t, raw, []string{s.value}, len(raw)/2)
					for _, chunk := range chunkRE.FindAllString(s.value, -1) {
						if bytes.Contains(got, []byte(chunk)) {
							t.Errorf("%s %q: %q of the secret left in %q", sc.shell, sc.args, chunk, got)
						}
					}
					if sc.want != "" && !regexp.MustCompile(sc.want).Match(got) {
						t.Errorf("%s %q: %q masked to %q, want it to match %s", sc.shell, sc.args, raw, got, sc.want)
					}
				}
			})
		}
	}
}

// Every byte in every position bash distinguishes, quoted by bash in
// every way it quotes: the whole quoted word is masked but for its
// delimiters and the text around the secret. This pins the escaping
// tables (which bytes printf %q backslashes, which ANSI-C quoting writes
// in octal) against the real bash.
func TestWriter_EveryByteQuotedByBashIsMasked(t *testing.T) {
	testenv.LookPath(t, "bash", "bash")
	var values []string
	for c := 1; c < 256; c++ {
		values = append(values, "Ab"+string([]byte{byte(c)})+"Cd")
	}
	values = append(values, "#Abcd", "~Abcd", "Ab:~Cd", "Ab=~Cd", "'Abcd", "Abcd'", "Ab''Cd")
	// Characters past ASCII that glibc deems printable or not, and invalid
	// UTF-8; each alone and after a control byte, which makes bash use
	// ANSI-C quoting for the whole value.
	for _, c := range []string{"é", "€", "😀", "\u00a0", "\u00ad", "\u200b", "\u2028", "\u0085", "\ufeff",
		"\ue000", "\ufffd", "\U000E0001", "\u0378", "\xed\xa0\x80", "\xc0\x80", "\xf4\x90\x80\x80", "\xe2\x82"} {
		values = append(values, "Ab"+c+"Cd", "Ab\x01"+c+"Cd")
	}
	env := []string{"N=" + fmt.Sprint(len(values))}
	for i, v := range values {
		env = append(env, fmt.Sprintf("V%d=%s", i, v))
	}
	// For each value, five words, each NUL-terminated: printf %q of it alone, after "x",
	// after "t="; ${v@Q}; declare -p; and set -x traces of it alone and
	// inside a word, each after a PS4 of "+@@".
	quote := `for ((i = 0; i < N; i++)); do n=V$i; v=${!n}
		printf '%q\0' "$v" "x$v" "t=$v"; printf '%s\0' "${v@Q}"
		declare -p "$n"; printf '\0'
	done`
	var trace strings.Builder
	trace.WriteString("PS4=+@@; set -x\n") // not from the environment: bash ignores it there as root
	for i := range values {
		fmt.Fprintf(&trace, ": \"$V%d\"\n: \"x${V%d}y\"\n", i, i)
	}
	word := regexp.MustCompile(`^(?:declare -x V\d+=)?(?:\$?'|")?(?:x|t=)?\*\*\*y?(?:'|")?\n?$`)
	for _, locale := range shellLocales(t) {
		t.Run(locale, func(t *testing.T) {
			env := append(env, "LC_ALL="+locale)
			quoted := strings.Split(string(runShell(t, env, "bash", "-c", quote)), "\x00")
			traced := strings.Split(string(runShell(t, env, "bash", "-c", trace.String())), "+@@: ")
			if len(quoted) != 5*len(values)+1 || len(traced) != 2*len(values)+1 {
				t.Fatalf("got %d quoted and %d traced words for %d values", len(quoted), len(traced), len(values))
			}
			for i, v := range values {
				for _, w := range slices.Concat(quoted[5*i:5*i+5], traced[1+2*i:3+2*i]) {
					if got := String(w, []string{v}); !word.MatchString(got) {
						t.Errorf("value %q: bash printed %q, masked to %q", v, w, got)
					}
				}
			}
		})
	}
}

// What common tools print for a secret as a URL component or a JSON
// string: each line is the secret alone, masked whole.
func TestWriter_SecretEncodedByCommonToolsIsMasked(t *testing.T) {
	tools := []struct {
		name string
		args []string
	}{
		{"jq", []string{"-rn", `env.S | @uri, tojson`}},
		{"jq", []string{"-an", `env.S`}},
		{"python3", []string{"-c", `import json, os, urllib.parse as u
s = os.environ["S"]
for e in (u.quote(s), u.quote_plus(s), u.quote(s, safe=""), json.dumps(s), json.dumps(s, ensure_ascii=False)):
    print(e)`}},
		{"node", []string{"-e", `const s = process.env.S; console.log(encodeURIComponent(s)); console.log(JSON.stringify(s))`}},
	}
	line := regexp.MustCompile(`^"?\*\*\*"?$`)
	for _, tool := range tools {
		if err := exec.Command(tool.name, "--version").Run(); err != nil {
			t.Logf("skipping %s: %v", tool.name, err)
			continue
		}
		for _, secret := range []string{
			"Qz1k@Wx2m Vy3n/Ru4p:Ts5q+Po6r?&=#%é'!()*~\"\\<\u2028\x7f\x01Mn7s",
			"Qz1k\nWx2m\tVy3n😀Ru4p\u00a0",
		} {
			raw := runShell(t, []string{"S=" + secret}, tool.name, tool.args...)
			got := streamMask(t, raw, []string{secret}, len(raw)/2)
			for _, l := range strings.Split(strings.TrimSuffix(string(got), "\n"), "\n") {
				if !line.MatchString(l) {
					t.Errorf("%s %q: %q masked to %q", tool.name, tool.args, raw, got)
					break
				}
			}
		}
	}
}
