// Package syncbuf is a bytes.Buffer that one goroutine (or a child process's
// output copier) may write while others read it, as tests do when they watch
// a running step or program, and as the runner holds what an executor
// preparing early writes for the setup log. It must not grow beyond that: it is not a pipe
// and never blocks a reader waiting for data.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write, Bytes and String. The zero value is
// an empty buffer.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Bytes returns a copy of everything written so far.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
