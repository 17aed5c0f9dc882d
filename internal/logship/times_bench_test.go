package logship

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The cost of line times on a step's log: a spool log's Write (which
// records them) against a plain file's, for 64 KiB of 80-byte lines per
// write and for one line per write (a record whenever the millisecond
// changed).
func benchWrite(b *testing.B, chunk []byte, spool bool) {
	var w interface{ Write([]byte) (int, error) }
	if spool {
		sp, err := CreateSpool(b.TempDir(), 1)
		if err != nil {
			b.Fatal(err)
		}
		lw, err := sp.Log(1)
		if err != nil {
			b.Fatal(err)
		}
		defer lw.Close()
		w = lw
	} else {
		f, err := os.Create(filepath.Join(b.TempDir(), "plain.log"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w = f
	}
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if _, err := w.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

var (
	line80   = append(bytes.Repeat([]byte("x"), 79), '\n')
	lines64k = bytes.Repeat(line80, 64<<10/80)
)

func BenchmarkLogWrite_PlainFile64KiB(b *testing.B)      { benchWrite(b, lines64k, false) }
func BenchmarkLogWrite_SpoolWithTimes64KiB(b *testing.B) { benchWrite(b, lines64k, true) }
func BenchmarkLogWrite_PlainFileOneLine(b *testing.B)    { benchWrite(b, line80, false) }
func BenchmarkLogWrite_SpoolWithTimesOneLine(b *testing.B) {
	benchWrite(b, line80, true)
}
