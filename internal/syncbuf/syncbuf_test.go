package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestBuffer_ConcurrentWritesAndReads is meant for -race: writers and a
// reader at once, and every byte written is there at the end.
func TestBuffer_ConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 400) {
		t.Fatalf("len = %d, want 400", len(got))
	}
	if c := b.Bytes(); len(c) != 400 {
		t.Fatalf("Bytes len = %d", len(c))
	}
}
