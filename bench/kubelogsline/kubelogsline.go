// Package kubelogsline is the line format of the kubelogs benchmark
// (bench/kubelogs.go), shared by its writer (bench/kubelogswriter) and
// its reader: "SEQ CLOCK PAYLOAD\n", Len bytes, SEQ the line's number
// from 0 (9 digits), CLOCK the writer's Unix nanoseconds when it wrote
// the line (19 digits), PAYLOAD Payload(SEQ).
package kubelogsline

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Len is the length of a line, its newline included.
const Len = 100

// payloadLen is the length of a line's payload: Len less "SEQ CLOCK " and
// the newline.
const payloadLen = Len - 9 - 1 - 19 - 1 - 1

// pool is the payloads' source: base64 characters from a fixed seed, so
// that a compressor shrinks them as far as 6 bits of entropy a byte (about
// 3/4) and a reader can check every byte.
var pool = func() []byte {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	r := rand.New(rand.NewPCG(37, 2))
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = chars[r.IntN(len(chars))]
	}
	return b
}()

// Payload is line seq's payload.
func Payload(seq int64) []byte {
	off := (seq * payloadLen) % int64(len(pool)-payloadLen)
	return pool[off : off+payloadLen]
}

// Append appends line seq with clock ns to b.
func Append(b []byte, seq, ns int64) []byte {
	b = appendDigits(b, seq, 9)
	b = append(b, ' ')
	b = appendDigits(b, ns, 19)
	b = append(b, ' ')
	b = append(b, Payload(seq)...)
	return append(b, '\n')
}

// Parse reads a line (without its newline): its number and clock. Errors:
// a line of another length or shape, a payload not Payload(seq).
func Parse(l []byte) (seq, ns int64, err error) {
	if len(l) != Len-1 || l[9] != ' ' || l[29] != ' ' {
		return 0, 0, fmt.Errorf("not a numbered line: %.40q", l)
	}
	if seq, err = strconv.ParseInt(string(l[:9]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("not a numbered line: %.40q", l)
	}
	if ns, err = strconv.ParseInt(string(l[10:29]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("not a numbered line: %.40q", l)
	}
	if string(l[30:]) != string(Payload(seq)) {
		return seq, ns, fmt.Errorf("line %d: payload differs from what was written", seq)
	}
	return seq, ns, nil
}

// appendDigits appends v's last n decimal digits, zero-padded.
func appendDigits(b []byte, v int64, n int) []byte {
	b = append(b, make([]byte, n)...)
	for i := len(b) - 1; i >= len(b)-n; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}
