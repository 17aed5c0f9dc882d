package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"knotless.dev/knotless/internal/workflow"
)

// HashFiles is the key function {{ hashFiles "PATTERN" ... }} over the
// checkout at root:
//
//   - Each pattern is a glob (workflow.MatchGlob: *, **, ?, [a-z]) matched
//     against the slash-separated path of every regular file below root,
//     relative to root ("go.sum", "web/package-lock.json", "**/go.sum").
//     A file matching any pattern counts once. Symbolic links are neither
//     followed nor hashed; the .git directory at the root is skipped.
//   - The result is the hex SHA-256 (64 digits) over, for each matching
//     file in byte order of its path: the path, a NUL byte, the hex SHA-256
//     of its contents, a newline. Renaming a file or changing a byte of it
//     changes the result; nothing else (modes, times) does.
//   - When no file matches, the result is the empty string (as GitHub
//     Actions does), and files is 0, so the caller can say so.
//
// Errors: a pattern that is absolute or leaves the checkout (".."), or a
// matching file that cannot be read.
func HashFiles(root string, patterns ...string) (sum string, files int, err error) {
	for _, p := range patterns {
		c := path.Clean(p)
		if p == "" || strings.HasPrefix(p, "/") || c == ".." || strings.HasPrefix(c, "../") {
			return "", 0, fmt.Errorf("hashFiles pattern %q: patterns are relative to the checkout and may not leave it", p)
		}
	}
	var matched []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		for _, pat := range patterns {
			if workflow.MatchGlob(strings.TrimPrefix(pat, "./"), rel) {
				matched = append(matched, rel)
				break
			}
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("hashFiles: %w", err)
	}
	if len(matched) == 0 {
		return "", 0, nil
	}
	sort.Strings(matched)
	h := sha256.New()
	for _, rel := range matched {
		f, err := os.Open(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return "", 0, fmt.Errorf("hashFiles: %w", err)
		}
		fh := sha256.New()
		_, err = io.Copy(fh, f)
		_ = f.Close()
		if err != nil {
			return "", 0, fmt.Errorf("hashFiles: read %s: %w", rel, err)
		}
		fmt.Fprintf(h, "%s\x00%s\n", rel, hex.EncodeToString(fh.Sum(nil)))
	}
	return hex.EncodeToString(h.Sum(nil)), len(matched), nil
}
