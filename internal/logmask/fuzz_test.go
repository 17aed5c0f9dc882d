package logmask

import (
	"bytes"
	"testing"
)

// FuzzWriter checks that streaming output equals the one-shot reference
// for any input, any secrets and any way of splitting the input.
func FuzzWriter(f *testing.F) {
	f.Add([]byte("pw=hunter2hunter2."), "hunter2hunter2", "", []byte{3, 9})
	f.Add([]byte("s3cr3t-value plain s3cr3t-value"), "s3cr3t-value", "", []byte{12, 7})
	f.Add([]byte("1abcdefghi2aaaaaa"), "abcdef", "defghi", []byte{4, 1, 1})
	f.Add([]byte("aGVsbG8+PndvcmxkPz8= x"), "hello>>world??", "aaaa", []byte{0, 7})
	f.Add([]byte("line-two\nline-one\n"), "line-one\nline-two", "x", []byte{9})
	f.Add([]byte("\xff\xfe\x00secretsecret"), "\xff\xfe\x00secret", "secr", []byte{1, 2, 3, 4, 5})
	// Encoded forms: percent (userinfo, lowercase query), shell quoting,
	// JSON; their shared prefixes with the value make partial matches.
	f.Add([]byte("https://u:p%40ss%2Fw@h/p%40ss/w?t=p%40ss%2fw p@ss/"), "p@ss/w", "", []byte{12, 5, 9})
	f.Add([]byte("+ echo 'ab'\\''cd' $'ab\\'cd\\n' ab\\'cd ab'\"'\"'cd\n"), "ab'cd", "ab'cd\n", []byte{8, 2, 11})
	f.Add([]byte("declare -x S=\"a\\\"b\\$c\" \\~a\"b$c"), "a\"b$c", "~a\"b$c", []byte{20, 1})
	f.Add([]byte(`{"t":"\u003cs\u0026\"\u00e9\ud83d\ude00"} <s&"é😀`), "<s&\"é😀", "", []byte{7, 7, 7})
	f.Fuzz(func(t *testing.T, data []byte, s1, s2 string, cuts []byte) {
		secrets := []string{s1, s2}
		want := refMask(data, secrets)
		var pos []int
		at := 0
		for _, c := range cuts {
			at += int(c)
			pos = append(pos, at)
		}
		got := streamMask(t, data, secrets, pos...)
		if !bytes.Equal(got, want) {
			t.Fatalf("secrets %q, input %q, cuts %v:\nstream    %q\nreference %q", secrets, data, pos, got, want)
		}
	})
}
