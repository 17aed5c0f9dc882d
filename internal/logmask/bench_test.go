package logmask

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// logText is typical build output: no secrets in it.
func logText(size int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "=== RUN   TestSomething/case_%d\n--- PASS: TestSomething/case_%d (0.%02ds)\nok  \tknotless.dev/knotless/internal/pkg%d\t0.%03ds\n", i, i, i%100, i%17, i%1000)
	}
	return b.Bytes()[:size]
}

var benchSecrets = []string{"ghp_16C7e42F292c6912E7710c838347Ae178B4a", "correct-horse-battery-staple", "AKIAIOSFODNN7EXAMPLE"}

func benchWriter(b *testing.B, data []byte, secrets []string) {
	const write = 32 << 10 // what io.Copy uses
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		w := New(io.Discard, secrets)
		for off := 0; off < len(data); off += write {
			w.Write(data[off:min(off+write, len(data))])
		}
		w.Close()
	}
}

func BenchmarkWriter_LogTextNoMatches(b *testing.B) {
	benchWriter(b, logText(8<<20), benchSecrets)
}

func BenchmarkWriter_LogTextWithMatches(b *testing.B) {
	data := logText(8 << 20)
	for off := 1000; off+100 < len(data); off += 4096 {
		copy(data[off:], benchSecrets[off%3])
	}
	benchWriter(b, data, benchSecrets)
}

func BenchmarkWriter_Base64TextNoMatches(b *testing.B) {
	// Worst ordinary case: text made of the base64 alphabet, where the
	// automaton rarely rests in its root state.
	data := bytes.Repeat([]byte("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODk=\n"), (8<<20)/86)
	benchWriter(b, data, benchSecrets)
}

func BenchmarkWriter_NoSecrets(b *testing.B) {
	benchWriter(b, logText(8<<20), nil)
}

// Passwords with punctuation, spaces and non-ASCII: each has many encoded
// forms (percent, shell, JSON), so these measure the cost of those forms.
var benchPunctSecrets = []string{"p@ss w0rd/+?&=#%'\"$`\\x", "Zé€-ünïcødé:\x01tab\there", "-----BEGIN KEY-----\nMIIB'Oq\\\"x\n-----END KEY-----\n"}

func BenchmarkWriter_LogTextNoMatchesPunctuatedSecrets(b *testing.B) {
	benchWriter(b, logText(8<<20), benchPunctSecrets)
}

// Building the automaton for many secrets, as a job with a large set of
// secrets does once per step.
func BenchmarkNew_100Secrets(b *testing.B) {
	var secrets []string
	for i := 0; i < 100; i++ {
		secrets = append(secrets, fmt.Sprintf("%s-%03d", benchPunctSecrets[i%3], i))
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		New(io.Discard, secrets)
	}
}
