package logship

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestSpool_EveryFileItWritesIsNamedInItsDoc writes to a spool through
// every method that makes a file (a step's log and its lines' times, a
// checkpoint, the journal, the outputs archive, the delivery cursor, the
// reserve) and holds Spool's doc comment to the directory: each file
// there is named in it (step numbers read as <N>). The runner's package doc
// once listed the spool's files without the .times ones; the list now
// lives here only, and this test keeps it whole.
func TestSpool_EveryFileItWritesIsNamedInItsDoc(t *testing.T) {
	sp, err := CreateSpool(t.TempDir(), 7)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	l, err := sp.Log(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write([]byte("a line\n")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cw, err := sp.Checkpoints(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := cw.Save(Checkpoint{Raw: 7, Log: 7}); err != nil {
		t.Fatal(err)
	}
	cw.Close()
	if err := sp.Append(JournalEntry{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.WriteOutputs(func(w io.Writer) (int, error) { _, err := w.Write([]byte("tar")); return 1, err }); err != nil {
		t.Fatal(err)
	}
	if err := sp.Delivered(map[int]int64{1: 7}); err != nil {
		t.Fatal(err)
	}
	if err := sp.saveCursor(shipCursor{}); err != nil {
		t.Fatal(err)
	}

	doc := spoolDoc(t)
	ents, err := os.ReadDir(sp.Dir())
	if err != nil {
		t.Fatal(err)
	}
	stepN := regexp.MustCompile(`^step-[0-9]+\.`)
	for _, e := range ents {
		name := stepN.ReplaceAllString(e.Name(), "step-<N>.")
		if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s`).MatchString(doc) {
			t.Errorf("the spool holds %s (%s), which Spool's doc does not list:\n%s", e.Name(), name, doc)
		}
	}
	if len(ents) < 7 {
		t.Errorf("only %d files written; the test no longer makes every kind", len(ents))
	}
}

// spoolDoc returns the doc comment of type Spool.
func spoolDoc(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "spool.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
			for _, s := range g.Specs {
				if ts := s.(*ast.TypeSpec); ts.Name.Name == "Spool" && g.Doc != nil {
					return strings.ReplaceAll(g.Doc.Text(), "\t", " ")
				}
			}
		}
	}
	t.Fatal("no doc comment on type Spool")
	return ""
}
