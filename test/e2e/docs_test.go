package e2e

import (
	"testing"

	"knotless.dev/knotless/internal/docscheck"
)

// The docs' command blocks are run by the tests of this package, each
// page's by the test docscheck's pageTests names; the markers of the
// blocks, and the checks that read the docs without running anything
// (every ```sh block marked, links, the architecture's hops, import graph
// and names), are in internal/docscheck.

// docBlock is one fenced block of a Markdown page (docscheck.Block).
type docBlock struct {
	doc    string // module-relative path of the page
	line   int    // of the opening fence, 1-based
	lang   string // the fence's info string ("sh", "yaml fragment", ...)
	marker string // the comment before the fence, without <!-- -->; "" if none
	text   string
}

// docBlocks returns the fenced blocks of the page at rel (module-relative).
func docBlocks(t testing.TB, rel string) []docBlock {
	t.Helper()
	bs, err := docscheck.Blocks(moduleRoot, rel)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]docBlock, len(bs))
	for i, b := range bs {
		out[i] = docBlock{doc: b.Doc, line: b.Line, lang: b.Lang, marker: b.Marker, text: b.Text}
	}
	return out
}
