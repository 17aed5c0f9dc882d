package docscheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines is how long a function's body may be (the lines between
// its braces) before its doc comment must say why it is long.
const maxFuncLines = 100

// longBecause is how a doc comment says why its function is long: a
// sentence that begins "Long because".
var longBecause = regexp.MustCompile(`(^|[.:;]\s+|\n)Long because `)

var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// pendingSplit are functions over maxFuncLines, without a reason, that
// are being split (file:function, with the length they had): none since
// issue 35 split the last. An entry no longer long fails, so that the list
// only shrinks.
var pendingSplit = map[string]int{}

// longFunc is a function of the module over maxFuncLines.
type longFunc struct {
	where string // file:function, file module-relative, function NAME or TYPE.NAME
	lines int
}

// longFuncs are the module's functions (test files, generated files and
// the test/cluster module aside) whose bodies exceed maxFuncLines lines
// and whose doc comments do not say why (longBecause), longest first.
func longFuncs(t testing.TB) []longFunc {
	t.Helper()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var out []longFunc
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			if cg.Pos() < f.Package && generated.MatchString(cgText(cg)) {
				return nil
			}
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.Body.Rbrace).Line - fset.Position(fd.Body.Lbrace).Line - 1
			if n <= maxFuncLines || (fd.Doc != nil && longBecause.MatchString(fd.Doc.Text())) {
				continue
			}
			out = append(out, longFunc{where: rel + ":" + funcName(fd), lines: n})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].lines != out[j].lines {
			return out[i].lines > out[j].lines
		}
		return out[i].where < out[j].where
	})
	return out
}

// cgText is a comment group's raw text, // and /* kept (Text drops the
// "Code generated" line's markers too, but keeps it; raw is simpler).
func cgText(cg *ast.CommentGroup) string {
	var b strings.Builder
	for _, c := range cg.List {
		b.WriteString(c.Text + "\n")
	}
	return b.String()
}

// funcName is NAME, or TYPE.NAME for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// No function of the module is over maxFuncLines lines unless its doc
// comment says why, in a sentence that begins "Long because" (test
// files and generated files aside), but for those being split now
// (pendingSplit), whose entries no longer long fail, to be removed.
func TestCode_FunctionsOver100LinesSayWhyTheyAreLong(t *testing.T) {
	found := map[string]bool{}
	var report []string
	for _, f := range longFuncs(t) {
		found[f.where] = true
		if _, pending := pendingSplit[f.where]; pending {
			t.Logf("pending split: %s: %d lines", f.where, f.lines)
			continue
		}
		report = append(report, fmt.Sprintf("%s: %d lines", f.where, f.lines))
	}
	if len(report) > 0 {
		t.Errorf("functions over %d lines whose doc comment does not say why (a sentence beginning \"Long because\"), longest first:\n%s",
			maxFuncLines, strings.Join(report, "\n"))
	}
	for where := range pendingSplit {
		if !found[where] {
			t.Errorf("pendingSplit names %s, which is no longer over %d lines without a reason (or is gone): remove it", where, maxFuncLines)
		}
	}
}
