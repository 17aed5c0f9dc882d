package cache

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHashFiles_SortedPathsAndContentsNoMatchIsEmpty(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"go.sum": "a\n", "sub/go.sum": "b\n", "sub/x.txt": "x", ".git/go.sum": "ignored",
	})
	one, n, err := HashFiles(root, "go.sum")
	if err != nil || n != 1 || len(one) != 64 {
		t.Fatalf("go.sum: %q %d %v", one, n, err)
	}
	all, n, err := HashFiles(root, "**/go.sum")
	if err != nil || n != 2 || all == one {
		t.Fatalf("**/go.sum: %q %d %v (.git must be skipped)", all, n, err)
	}
	// The same files named twice count once; order of patterns is irrelevant.
	again, _, _ := HashFiles(root, "sub/go.sum", "**/go.sum", "go.sum")
	if again != all {
		t.Fatal("same files, different hash")
	}
	// A content change changes the hash; a mode or time change does not.
	if err := os.Chmod(filepath.Join(root, "go.sum"), 0o600); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := HashFiles(root, "**/go.sum"); h != all {
		t.Fatal("mode change changed the hash")
	}
	writeFiles(t, root, map[string]string{"sub/go.sum": "c\n"})
	if h, _, _ := HashFiles(root, "**/go.sum"); h == all {
		t.Fatal("content change kept the hash")
	}
	if h, n, err := HashFiles(root, "nothing.lock"); h != "" || n != 0 || err != nil {
		t.Fatalf("no match: %q %d %v", h, n, err)
	}
	for _, bad := range []string{"/etc/passwd", "../x", "a/../../x"} {
		if _, _, err := HashFiles(root, bad); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}
