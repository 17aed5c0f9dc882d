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
