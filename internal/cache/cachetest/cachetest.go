// Package cachetest makes cache contents for tests and benchmarks of the
// cache seam (package cache, executor.Cacher).
package cachetest

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// Tree200MB is the size of the tree BigTree makes: 200 MiB.
const Tree200MB = 200 << 20

// BigTree writes a tree of size bytes under dir: files of 1 MiB in 10
// directories, each file half random bytes and half a repeated text line,
// as a cache of modules and build objects compresses roughly 2:1. It
// returns the number of files.
func BigTree(tb testing.TB, dir string, size int64) int {
	tb.Helper()
	rnd := rand.New(rand.NewSource(42))
	const fileSize = 1 << 20
	line := []byte("func (s *Store) Lookup(repo, key string, restoreKeys []string) (e *Entry, m Match)\n")
	buf := make([]byte, fileSize)
	n := 0
	for written := int64(0); written < size; written += fileSize {
		rnd.Read(buf[:fileSize/2])
		for i := fileSize / 2; i < fileSize; i += len(line) {
			copy(buf[i:], line)
		}
		p := filepath.Join(dir, fmt.Sprintf("d%d", n%10), fmt.Sprintf("f%04d.bin", n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			tb.Fatal(err)
		}
		n++
	}
	return n
}
