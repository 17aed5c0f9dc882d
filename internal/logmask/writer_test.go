package logmask

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"math/rand"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"knotless.dev/knotless/internal/testenv"
)

// refMask is the definition the Writer must meet, written the slow and
// obvious way: hide every byte inside any occurrence of any pattern, and
// replace each run of hidden bytes with one "***".
func refMask(data []byte, secrets []string) []byte {
	hidden := make([]bool, len(data))
	for _, p := range patterns(secrets) {
		for i := 0; i+len(p) <= len(data); i++ {
			if bytes.Equal(data[i:i+len(p)], p) {
				for j := i; j < i+len(p); j++ {
					hidden[j] = true
				}
			}
		}
	}
	var out []byte
	for i := range data {
		switch {
		case !hidden[i]:
			out = append(out, data[i])
		case i == 0 || !hidden[i-1]:
			out = append(out, Replacement...)
		}
	}
	return out
}

// minimalHold is the length of the longest suffix of stream that is a
// proper prefix of some pattern: what a Writer must hold back, and no more.
func minimalHold(stream []byte, secrets []string) int {
	best := 0
	for _, p := range patterns(secrets) {
		for n := min(len(p)-1, len(stream)); n > best; n-- {
			if p[n-1] == stream[len(stream)-1] && bytes.HasSuffix(stream, p[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

// streamMask writes data to a Writer in pieces cut at the given offsets.
func streamMask(t testing.TB, data []byte, secrets []string, cuts ...int) []byte {
	t.Helper()
	var out bytes.Buffer
	w := New(&out, secrets)
	prev := 0
	for _, c := range append(cuts, len(data)) {
		c = max(prev, min(c, len(data)))
		n, err := w.Write(data[prev:c])
		if err != nil || n != c-prev {
			t.Fatalf("Write(%d bytes) = %d, %v", c-prev, n, err)
		}
		if want := minimalHold(data[:c], secrets); len(w.held) != want {
			t.Fatalf("after %d bytes: holding %d bytes, want %d (the longest tail a pattern could continue)", c, len(w.held), want)
		}
		prev = c
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

var splitCases = []struct {
	name    string
	secrets []string
	input   string
	want    string
}{
	{"Plain", []string{"hunter2hunter2"}, "pw=hunter2hunter2.\n", "pw=***.\n"},
	{"Twice", []string{"s3cr3t-value"}, "a s3cr3t-value b s3cr3t-value c\n", "a *** b *** c\n"},
	{"PrefixNotSecret", []string{"s3cr3t-value"}, "s3cr3t-valu s3cr3t-value", "s3cr3t-valu ***"},
	{"Base64Std", []string{"hello>>world??"}, "x " + base64.StdEncoding.EncodeToString([]byte("hello>>world??")) + " y", "x *** y"},
	{"Base64URL", []string{"hello>>world??"}, base64.URLEncoding.EncodeToString([]byte("hello>>world??")) + "\n", "***\n"},
	{"Base64Raw", []string{"hello>>world??"}, "[" + base64.RawURLEncoding.EncodeToString([]byte("hello>>world??")) + "]", "[***]"},
	{"Overlapping", []string{"abcdef", "defghi"}, "1abcdefghi2", "1***2"},
	{"SelfOverlap", []string{"aaaa"}, "xaaaaaay", "x***y"},
	{"Adjacent", []string{"tok3n"}, "tok3ntok3n tok3n", "*** ***"},
	{"NestedLonger", []string{"secret", "my-secret-key"}, "my-secret-key and secret", "*** and ***"},
	{"MultiLine", []string{"line-one\nline-two\nab\n"}, "line-two\nab\nline-one\n", "***\nab\n***\n"},
	{"TrailingNewlineValue", []string{"t0ken-value\n"}, "got t0ken-value.", "got ***."},
	{"CRLFLines", []string{"first-line\r\nsecond-line"}, "second-line!", "***!"},
	{"TooShortNotMasked", []string{"abc", "", "    "}, "abc    abc", "abc    abc"},
	{"NonUTF8", []string{"\xff\xfe\x00secret"}, "a\xff\xfe\x00secret\x80b", "a***\x80b"},
}

func TestWriter_SecretSplitAtEveryBytePosition(t *testing.T) {
	for _, tc := range splitCases {
		t.Run(tc.name, func(t *testing.T) {
			checkEverySplit(t, tc.secrets, tc.input, tc.want)
		})
	}
}

// checkEverySplit asserts that input masks to want when written whole,
// cut once or twice at every position (twice only for short inputs), and
// one byte per Write.
func checkEverySplit(t *testing.T, secrets []string, input, want string) {
	t.Helper()
	data := []byte(input)
	if got := refMask(data, secrets); string(got) != want {
		t.Fatalf("reference = %q, want %q", got, want)
	}
	for i := 0; i <= len(data); i++ {
		if got := streamMask(t, data, secrets, i); string(got) != want {
			t.Fatalf("split at %d: %q, want %q", i, got, want)
		}
		for j := i; j <= len(data) && len(data) <= 40; j++ {
			if got := streamMask(t, data, secrets, i, j); string(got) != want {
				t.Fatalf("split at %d and %d: %q, want %q", i, j, got, want)
			}
		}
	}
	cuts := make([]int, len(data))
	for i := range cuts {
		cuts[i] = i
	}
	if got := streamMask(t, data, secrets, cuts...); string(got) != want {
		t.Fatalf("byte by byte: %q, want %q", got, want)
	}
}

func TestPatterns_IncludeEveryBase64Encoding(t *testing.T) {
	for _, secret := range []string{"abcd", "abcde", "abcdef", "p@ss/w+rd?>>", strings.Repeat("\xfb\xff", 9)} {
		pats := map[string]bool{}
		for _, p := range patterns([]string{secret}) {
			pats[string(p)] = true
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			if e := enc.EncodeToString([]byte(secret)); !pats[e] {
				t.Errorf("secret %q: %q missing from patterns", secret, e)
			}
		}
	}
}

// Whatever bytes surround the secret, the characters of the encoding
// that the secret alone determines are masked.
func TestWriter_Base64OfSecretInsideLongerText(t *testing.T) {
	secret := "Zm9v-bar_BAZ+qux/1234"
	rng := rand.New(rand.NewSource(1))
	for k := 0; k < 3; k++ {
		for trial := 0; trial < 20; trial++ {
			pre := make([]byte, k+3*rng.Intn(3))
			rng.Read(pre)
			post := make([]byte, rng.Intn(4))
			rng.Read(post)
			plain := append(append(append([]byte{}, pre...), secret...), post...)
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				encoded := enc.EncodeToString(plain)
				got := string(streamMask(t, []byte(encoded), []string{secret}, len(encoded)/2))
				// At most the characters touching pre and post remain.
				before, after, found := strings.Cut(got, Replacement)
				if !found || len(before) > (len(pre)*8+5)/6 || len(after) > len(encoded)-8*(len(pre)+len(secret))/6 {
					t.Fatalf("offset %d: %q masked to %q", len(pre), encoded, got)
				}
			}
		}
	}
}

// What people actually run in a step: echo into base64(1).
func TestWriter_EchoPipedToBase64IsMasked(t *testing.T) {
	testenv.LookPath(t, "base64", "coreutils")
	secret := "correct-horse-battery-staple"
	visible := regexp.MustCompile(`^[A-Za-z0-9+/=]{0,3}\*\*\*[A-Za-z0-9+/=]{0,4}\n$`)
	for _, script := range []string{
		`echo -n "$S" | base64`,
		`echo "$S" | base64`,
		`echo "x$S" | base64`,
		`printf 'xy%s\n' "$S" | base64`,
		`printf '%s' "$S" | base64 | tr -d '\n'; echo`,
	} {
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = []string{"S=" + secret, "PATH=/usr/bin:/bin"}
		raw, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		got := streamMask(t, raw, []string{secret}, len(raw)/3)
		if !visible.Match(got) {
			t.Errorf("%s: %q masked to %q", script, raw, got)
		}
	}
}

func TestWriter_BinaryPassesByteExact(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	data := make([]byte, 1<<20)
	rng.Read(data)
	secrets := []string{"a-secret-that-random-bytes-will-not-contain"}
	got := streamMask(t, data, secrets, 1, 4096, 70000, 500000)
	if !bytes.Equal(got, data) {
		t.Fatal("binary data without secrets changed")
	}
	// And with secrets inside binary data, the result is the reference.
	copy(data[1000:], secrets[0])
	copy(data[600000:], base64.StdEncoding.EncodeToString([]byte(secrets[0])))
	want := refMask(data, secrets)
	if got := streamMask(t, data, secrets, 1010, 600010); !bytes.Equal(got, want) || bytes.Contains(got, []byte(secrets[0])) {
		t.Fatal("binary data with secrets differs from the reference")
	}
}

// Bytes that cannot start a secret are passed on in the same Write; only
// the tail that could is held, and Close releases it.
func TestWriter_HoldsOnlyAPossibleSecretStart(t *testing.T) {
	var out bytes.Buffer
	w := New(&out, []string{"s3cr3t-value"})
	step := func(in, wantOut string) {
		t.Helper()
		if n, err := w.Write([]byte(in)); n != len(in) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if out.String() != wantOut {
			t.Fatalf("after Write(%q): out = %q, want %q", in, out.String(), wantOut)
		}
	}
	step("hello world\n", "hello world\n")
	step("token: s3c", "hello world\ntoken: ")
	step("r3t-val", "hello world\ntoken: ")
	step("ue!\n", "hello world\ntoken: ***!\n")
	step("ends with s3cr", "hello world\ntoken: ***!\nends with ")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want := "hello world\ntoken: ***!\nends with s3cr"; out.String() != want {
		t.Fatalf("after Close: %q, want %q", out.String(), want)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestWriter_FlushReleasesHeldBytes(t *testing.T) {
	var out bytes.Buffer
	w := New(&out, []string{"s3cr3t-value"})
	w.Write([]byte("a s3cr3t"))
	if err := w.Flush(); err != nil || out.String() != "a s3cr3t" {
		t.Fatalf("Flush: %v, out %q", err, out.String())
	}
	w.Write([]byte(" s3cr3t-value"))
	w.Close()
	if out.String() != "a s3cr3t ***" {
		t.Fatalf("out %q", out.String())
	}
}

type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n--; f.n < 0 {
		return 0, io.ErrClosedPipe
	}
	return len(p), nil
}

func TestWriter_UnderlyingErrorIsReturnedAndSticky(t *testing.T) {
	w := New(&failingWriter{n: 1}, []string{"s3cr3t-value"})
	if n, err := w.Write([]byte("ok\n")); n != 3 || err != nil {
		t.Fatalf("first Write = %d, %v", n, err)
	}
	if n, err := w.Write([]byte("fails\n")); n != 0 || !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("second Write = %d, %v", n, err)
	}
	if _, err := w.Write([]byte("again\n")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("third Write: %v", err)
	}
	if err := w.Close(); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Close: %v", err)
	}
}

func TestWriter_NoSecretsPassesThrough(t *testing.T) {
	data := []byte("anything \x00\xff at all")
	if got := streamMask(t, data, nil, 3); !bytes.Equal(got, data) {
		t.Fatalf("%q", got)
	}
	if got := streamMask(t, data, []string{"ab"}, 3); !bytes.Equal(got, data) {
		t.Fatalf("too-short secret changed output: %q", got)
	}
}

func TestTooShort(t *testing.T) {
	for s, want := range map[string]bool{"": true, "abc": true, "    ": true, "\n\n\n\n": true, "abcd": false, " ab ": false} {
		if got := TooShort(s); got != want {
			t.Errorf("TooShort(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestString(t *testing.T) {
	if got := String("error: auth s3cr3t-value failed", []string{"s3cr3t-value"}); got != "error: auth *** failed" {
		t.Fatalf("%q", got)
	}
}

// Two goroutines writing whole lines (as stdout and stderr copiers do)
// never lose or duplicate bytes.
func TestWriter_ConcurrentWritesKeepEveryLine(t *testing.T) {
	var out bytes.Buffer
	w := New(&out, []string{"s3cr3t-value"})
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				w.Write([]byte("line s3cr3t-value end\n"))
			}
		}()
	}
	wg.Wait()
	w.Close()
	if got, want := out.String(), strings.Repeat("line *** end\n", 2000); got != want {
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}
}

// A Write passed through unchanged must still end the previous hidden run,
// or the next secret would vanish without its "***".
func TestWriter_MarkerAfterPassThroughWrite(t *testing.T) {
	data := []byte("s3cr3t-value plain s3cr3t-value")
	if got := streamMask(t, data, []string{"s3cr3t-value"}, 12, 19); string(got) != "*** plain ***" {
		t.Fatalf("%q", got)
	}
}

// A whole secret at the end of a Write can not grow into a longer match,
// so its "***" goes out at once instead of waiting for the next Write.
func TestWriter_CompleteSecretAtEndOfWriteIsNotHeld(t *testing.T) {
	var out bytes.Buffer
	w := New(&out, []string{"s3cr3t-value"})
	w.Write([]byte("token s3cr3t-value"))
	if out.String() != "token ***" {
		t.Fatalf("out = %q, want %q before any further Write", out.String(), "token ***")
	}
}

// A restarted runner masks the rest of a step's output with a new Writer
// from the last checkpoint: the two outputs together must be exactly the
// output of one Writer over the whole stream, wherever the cut falls.
func TestWriter_ResumedAtACheckpointContinuesTheSameOutput(t *testing.T) {
	for _, secrets := range [][]string{nil, {"abcdef", "efgh", "s3cr3t-value"}} {
		testResumedAtCheckpoint(t, secrets)
	}
}

func testResumedAtCheckpoint(t *testing.T, secrets []string) {
	stream := []byte("x abcdefgh y abcdef z efgh abcdefxy s3cr3t-value s3cr3t-values3cr3t-value end abc")
	var whole bytes.Buffer
	one := New(&whole, secrets)
	for i := range stream {
		one.Write(stream[i : i+1])
	}
	one.Close()
	for cut := 0; cut <= len(stream); cut++ {
		var first bytes.Buffer
		w := New(&first, secrets)
		var n int64
		var hidden bool
		outAt := 0
		for i := 0; i < cut; i++ {
			w.Write(stream[i : i+1])
			if cn, ch, ok := w.Checkpoint(); ok {
				n, hidden, outAt = cn, ch, first.Len()
			}
		}
		var rest bytes.Buffer
		r := NewResumed(&rest, secrets, hidden)
		r.Write(stream[n:])
		r.Close()
		got := append(first.Bytes()[:outAt:outAt], rest.Bytes()...)
		if !bytes.Equal(got, whole.Bytes()) {
			t.Fatalf("cut after byte %d, resumed at checkpoint %d: got %q, want %q", cut, n, got, whole.Bytes())
		}
	}
}

// Secrets now reach steps byte-exact even when they are not valid UTF-8:
// such a value is masked as bytes, raw and in its byte-wise encodings
// (base64, percent, bash's C-locale $'...'), whole or split across writes.
func TestWriter_NonUTF8SecretMaskedAsBytes(t *testing.T) {
	secret := "\xff\xfe\x80k\xc3(\xa0\xa1\xe2(\xa1\xf0\x90(\xbc\x01\x7f\xed\xa0"
	secrets := []string{secret}
	forms := map[string]string{
		"raw":     secret,
		"base64":  base64.StdEncoding.EncodeToString([]byte(secret)),
		"percent": percentEncode(secret, ""),
		"ansi-c":  ansiCQuoted(secret, false),
	}
	for name, form := range forms {
		t.Run(name, func(t *testing.T) {
			checkEverySplit(t, secrets, "v="+form+"\n", "v=***\n")
		})
	}
	if got := String("token "+secret+" end", secrets); got != "token *** end" {
		t.Errorf("String = %q", got)
	}
	// A value that merely shares its valid prefix is left alone.
	if got := String("\xff\xfe\x80k\xc3(", secrets); got != "\xff\xfe\x80k\xc3(" {
		t.Errorf("String of a prefix = %q", got)
	}
}
