package workflow

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"knotless.dev/knotless/internal/api"
)

// Limits on what Parse reads. The YAML parser takes time quadratic in the
// number of entries of a collection and worse in the depth of flow
// nesting, so the input is bounded before it is parsed: a hostile file
// costs the server well under a second. Real workflows stay far below.
const (
	MaxFileSize  = 128 << 10 // bytes
	maxEntries   = 2500      // keys and list entries (":", "-", "?", ",")
	maxTokens    = 30000     // YAML tokens of any kind
	maxFlowDepth = 32        // nesting of [ ] and { }
)

// Parse parses and validates the workflow file at path (used in messages
// and for the default name) holding src. On any problem it returns a nil
// Workflow and an ErrorList naming every problem found as PATH:LINE:COL,
// in file order. It never panics. For a workflow with a matrix, every run
// is checked and the first is returned (Expand returns them all).
func Parse(path string, src []byte) (*Workflow, error) {
	runs, errs := parse(path, src, nil)
	if len(errs) > 0 {
		return nil, errs
	}
	return runs[0], nil
}

// Expand parses and validates the workflow file as Parse does and returns
// every run it makes: one per combination of its matrix (Matrix.Runs),
// each with its values in place, Combo set and Name saying them; the
// workflow itself when it has no matrix.
func Expand(path string, src []byte) ([]*Workflow, error) {
	runs, errs := parse(path, src, nil)
	if len(errs) > 0 {
		return nil, errs
	}
	return runs, nil
}

// ParseRun parses the workflow file for the one run with the matrix
// values c (nil for a workflow without a matrix), as Expand gives it;
// an error when the file has no such run (or has a matrix and c is nil).
// Only that run is checked: what a runner needs of a run it claimed.
func ParseRun(path string, src []byte, c Combo) (*Workflow, error) {
	if c == nil {
		c = Combo{}
	}
	runs, errs := parse(path, src, c)
	if len(errs) > 0 {
		return nil, errs
	}
	return runs[0], nil
}

// LintFile returns every problem in the workflow file (nil if none), as
// Parse would report them.
func LintFile(path string, src []byte) ErrorList {
	_, errs := parse(path, src, nil)
	return errs
}

type decoder struct {
	path    string
	errs    ErrorList
	aliases map[*ast.AliasNode]*ast.AnchorNode
	// matrix and combo are the workflow's matrix and the run being
	// decoded: strings get its `{{ matrix.NAME }}` values (substMatrix).
	// brokenMatrix: the matrix has errors (reported once), so its uses
	// are not. fixed, when set, names the key being read that cannot
	// vary by run (on, needs, ...): a matrix value there is an error.
	matrix       *Matrix
	combo        Combo
	matrixNames  []string // every name a run of the matrix has
	brokenMatrix bool
	fixed        string
	// substituted is set when a matrix value was put into a string.
	substituted bool
	// needsUses are the images' `{{ needs.NAME.VAR }}` references, checked
	// against needs: once it is read (checkNeedsRefs).
	needsUses []needsUse
	// work counts the mapping entries and list elements read: what
	// checking every run of a matrix costs (maxMatrixWork).
	work int
}

func (d *decoder) errorf(p pos, format string, args ...any) {
	d.errs = append(d.errs, &Error{Path: d.path, Line: p.line, Col: p.col, Msg: fmt.Sprintf(format, args...)})
}

// parse decodes the runs of the workflow file: every run of its matrix
// (only the run with values pick, when pick is not nil).
func parse(path string, src []byte, pick Combo) ([]*Workflow, ErrorList) {
	// Messages name the file safely; a file name that needs escaping is
	// refused: the run's name comes from it (or it is shown beside an
	// explicit name), and an explicit name may not hold a control
	// character either.
	d := &decoder{path: DisplayPath(path)}
	if err := api.CheckText("the file name", defaultName(path)); err != nil {
		d.errorf(pos{1, 1}, "%v; the workflow's name comes from it: rename the file", err)
	}
	root := d.document(src)
	if root == nil || !d.prepare(root) {
		return nil, d.sorted(d.errs)
	}
	body, at := d.deref(root), nodePos(root)
	var combos []Combo
	var matrixAt pos
	if me := d.matrixEntry(body); me != nil {
		matrixAt = me.kpos
		before := len(d.errs)
		d.fixed = "matrix"
		d.matrix = d.decodeMatrix(*me)
		d.fixed = ""
		if len(d.errs) > before {
			d.matrix, d.brokenMatrix = nil, true
		}
		if d.matrix != nil {
			var err error
			if combos, err = d.matrix.Runs(); err != nil {
				d.errorf(me.kpos, "%v", err)
				d.matrix, d.brokenMatrix = nil, true
			}
		}
	}
	if pick != nil {
		switch {
		case d.matrix == nil && len(pick) > 0 && !d.brokenMatrix:
			d.errorf(pos{1, 1}, "the run has matrix values %s but the workflow has no matrix", pick)
			return nil, d.sorted(d.errs)
		case d.matrix != nil:
			i := slices.IndexFunc(combos, pick.Equal)
			if i < 0 {
				d.errorf(matrixAt, "the run's matrix values (%s) are not one of the workflow's runs", pick)
				return nil, d.sorted(d.errs)
			}
			combos = combos[i : i+1]
		}
	}
	if d.matrix == nil {
		w := d.workflow(body, at)
		if len(d.errs) > 0 {
			return nil, d.sorted(d.errs)
		}
		return []*Workflow{w}, nil
	}
	return d.decodeRuns(body, at, combos, matrixAt)
}

// decodeRuns decodes body (the workflow's mapping, at at) once for each
// of combos, the matrix's runs, so that a value that is wrong where it
// lands (an image with a space, a size without a unit) is reported; a
// problem of only some runs says which. A matrix too large to check is an
// error at matrixAt.
func (d *decoder) decodeRuns(body ast.Node, at pos, combos []Combo, matrixAt pos) ([]*Workflow, ErrorList) {
	matrixErrs := d.errs
	type seen struct {
		err   *Error
		runs  int
		first Combo
	}
	var order []Error
	found := map[Error]*seen{}
	var names []string
	for _, c := range combos {
		for _, v := range c {
			if !slices.Contains(names, v.Name) {
				names = append(names, v.Name)
			}
		}
	}
	var out []*Workflow
	for i, c := range combos {
		r := &decoder{path: d.path, aliases: d.aliases, matrix: d.matrix, combo: c, matrixNames: names}
		w := r.workflow(body, at)
		for _, e := range r.errs {
			if s, ok := found[*e]; ok {
				s.runs++
				continue
			}
			found[*e] = &seen{err: e, runs: 1, first: c}
			order = append(order, *e)
		}
		out = append(out, w)
		if i == 0 && r.work*len(combos) > maxMatrixWork {
			d.errorf(matrixAt, "the matrix makes %d runs of a workflow of %d keys and list entries: too much to check (at most %d in all); make the matrix or the file smaller", len(combos), r.work, maxMatrixWork)
			return nil, d.sorted(d.errs)
		}
	}
	errs := slices.Clone(matrixErrs)
	for _, k := range order {
		s := found[k]
		e := *s.err
		if s.runs < len(combos) {
			e.Msg += fmt.Sprintf(" (in the run with %s)", s.first)
		}
		errs = append(errs, &e)
	}
	if len(errs) > 0 {
		return nil, d.sorted(errs)
	}
	return out, nil
}

// sorted orders errs by position and says each problem once (the same
// node reached through two aliases reports the same problem twice).
func (d *decoder) sorted(errs ErrorList) ErrorList {
	seen := map[Error]bool{}
	out := make(ErrorList, 0, len(errs))
	for _, e := range errs {
		if !seen[*e] {
			seen[*e] = true
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b *Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Col - b.Col
	})
	return out
}

// document checks the bytes and the YAML syntax and returns the body of
// the one document, or nil after reporting why there is none.
func (d *decoder) document(src []byte) ast.Node {
	if len(src) > MaxFileSize {
		d.errorf(pos{1, 1}, "workflow file is %d bytes; the limit is %d", len(src), MaxFileSize)
		return nil
	}
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	if !utf8.Valid(src) {
		d.errorf(invalidUTF8Pos(src), "workflow file is not valid UTF-8")
		return nil
	}
	if i := bytes.IndexByte(src, 0); i >= 0 {
		d.errorf(bytePos(src, i), "workflow file contains a NUL byte")
		return nil
	}
	tokens := lexer.Tokenize(string(src))
	if !d.checkTokens(tokens) {
		return nil
	}
	file, err := parseYAML(tokens)
	if err != nil {
		d.syntaxError(err, nil)
		return nil
	}
	var bodies []*ast.DocumentNode
	for _, doc := range file.Docs {
		if doc != nil && !isNil(doc.Body) {
			bodies = append(bodies, doc)
		}
	}
	switch {
	case len(bodies) == 0:
		d.errorf(pos{1, 1}, "workflow file is empty; expected a mapping with at least steps:")
		return nil
	case len(bodies) > 1:
		p := nodePos(bodies[1].Body)
		if bodies[1].Start != nil {
			p = tokenPos(bodies[1].Start)
		}
		d.errorf(p, "a second YAML document starts here; a workflow file holds exactly one")
		return nil
	}
	return bodies[0].Body
}

// parseYAML runs the YAML parser, turning a panic inside it into an error
// so that no input can crash a caller.
func parseYAML(tokens token.Tokens) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("the YAML parser failed on this input: %v", r)
		}
	}()
	// Duplicate keys are allowed here and reported by entries, together
	// with every other problem, instead of stopping at the first.
	return parser.Parse(tokens, 0, parser.AllowDuplicateMapKey())
}

// checkTokens enforces the limits on the token stream before parsing.
func (d *decoder) checkTokens(tokens token.Tokens) bool {
	if tk := tokens.InvalidToken(); tk != nil {
		d.syntaxError(errors.New(tk.Error), tk)
		return false
	}
	entries, depth := 0, 0
	for i, tk := range tokens {
		if tk == nil {
			continue
		}
		if i >= maxTokens {
			d.errorf(tokenPos(tk), "workflow file has more than %d YAML tokens; split it up", maxTokens)
			return false
		}
		switch tk.Type {
		case token.MappingValueType, token.SequenceEntryType, token.MappingKeyType, token.CollectEntryType:
			if entries++; entries > maxEntries {
				d.errorf(tokenPos(tk), "workflow file has more than %d keys and list entries; split it up", maxEntries)
				return false
			}
		case token.SequenceStartType, token.MappingStartType:
			if depth++; depth > maxFlowDepth {
				d.errorf(tokenPos(tk), "[ ] and { } nest deeper than %d levels", maxFlowDepth)
				return false
			}
		case token.SequenceEndType, token.MappingEndType:
			depth = max(depth-1, 0)
		}
	}
	return true
}

// syntaxError reports a YAML syntax error at its token (or at tk when the
// error carries none).
func (d *decoder) syntaxError(err error, tk *token.Token) {
	msg := err.Error()
	var ye yaml.Error
	if errors.As(err, &ye) {
		msg = ye.GetMessage()
		if ye.GetToken() != nil {
			tk = ye.GetToken()
		}
	}
	if strings.Contains(msg, "'\t'") {
		msg += " (indent YAML with spaces, not tabs)"
	}
	d.errorf(tokenPos(tk), "invalid YAML: %s", msg)
}

func invalidUTF8Pos(src []byte) pos {
	i := 0
	for i < len(src) {
		r, size := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	return bytePos(src, i)
}

// bytePos converts a byte offset into a line and a column in characters.
func bytePos(src []byte, off int) pos {
	line := 1 + bytes.Count(src[:off], []byte("\n"))
	start := bytes.LastIndexByte(src[:off], '\n') + 1
	return pos{line, 1 + utf8.RuneCount(src[start:off])}
}

// defaultName is the file name without directory and extension.
func defaultName(p string) string {
	base := path.Base(strings.ReplaceAll(p, "\\", "/"))
	if ext := path.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	if base == "" || base == "." || base == "/" {
		return "workflow"
	}
	return base
}
