package docscheck

import (
	"bufio"
	"bytes"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Block is one fenced block of a Markdown page.
type Block struct {
	Doc    string // the page's path, relative to the root it was read from
	Line   int    // of the opening fence, 1-based
	Lang   string // the fence's info string ("sh", "yaml fragment", ...)
	Marker string // the HTML comment on the line before the fence, without <!-- -->; "" if none
	Text   string // the lines between the fences, each ending in "\n"
}

var markerLine = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)

// Blocks returns the fenced blocks of the page at rel under root, in
// order. It fails for a page it cannot read and for a fence that is never
// closed.
func Blocks(root, rel string) ([]Block, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var blocks []Block
	var cur *Block
	marker := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &Block{Doc: rel, Line: n, Lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), Marker: marker}
			marker = ""
		default:
			marker = ""
			if m := markerLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				marker = m[1]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a fenced block that never ends", rel, cur.Line)
	}
	return blocks, nil
}

// Pages returns the Markdown pages of the git work tree at root (tracked,
// or untracked and not ignored, and present), relative to root. It runs
// git ls-files.
func Pages(root string) ([]string, error) {
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var pages []string
	for _, p := range strings.Fields(string(out)) {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			pages = append(pages, p)
		}
	}
	return pages, nil
}

// proseLines yields each line of a Markdown page's text outside its fenced
// blocks, with its 1-based line number; the fence lines themselves are
// not yielded.
func proseLines(text string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		fenced := false
		for n, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
				continue
			}
			if !fenced && !yield(n+1, line) {
				return
			}
		}
	}
}
