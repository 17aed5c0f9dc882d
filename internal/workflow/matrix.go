package workflow

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/goccy/go-yaml/ast"
)

// MaxMatrixRuns caps the runs one workflow's `matrix:` makes (GitHub
// Actions' cap too): past it, the workflow is an error.
const MaxMatrixRuns = 256

// maxMatrixWork bounds the entries decoded to check every run of a matrix
// (runs × the file's keys and list entries), so that a hostile file with
// a large matrix stays as cheap to check as any other.
const maxMatrixWork = 2_000_000

// Matrix is `matrix:`: one run of the workflow per combination of its
// axes' values, as GitHub Actions' strategy.matrix makes them (Runs).
type Matrix struct {
	// Axes are the names with their values, in file order.
	Axes []Axis
	// Exclude removes every combination that has all of an entry's
	// values; Include adds values to the combinations that have all of
	// an entry's axis values, or adds the entry as a run of its own when
	// no combination does.
	Exclude []Combo
	Include []Combo
	// FailFast (`fail-fast: true`, default false): a run of the matrix
	// that fails or errors cancels the others that have not ended.
	FailFast bool
}

// Axis is one name of a matrix with its values.
type Axis struct {
	Name   string
	Values []string
}

// MatrixValue is one name of a matrix with the value of one run.
type MatrixValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Combo is the matrix values of one run: the axes in file order, then
// names only include adds, in the order they first appear.
type Combo []MatrixValue

// Get returns the value of name.
func (c Combo) Get(name string) (string, bool) {
	for _, v := range c {
		if v.Name == name {
			return v.Value, true
		}
	}
	return "", false
}

// String is "os=linux, go=1.22".
func (c Combo) String() string {
	parts := make([]string, len(c))
	for i, v := range c {
		parts[i] = v.Name + "=" + v.Value
	}
	return strings.Join(parts, ", ")
}

// Label is the values alone, "linux, 1.22": what a run's name shows in
// parentheses after the workflow's.
func (c Combo) Label() string {
	parts := make([]string, len(c))
	for i, v := range c {
		parts[i] = v.Value
	}
	return strings.Join(parts, ", ")
}

// Equal reports whether c and o hold the same names and values in the
// same order.
func (c Combo) Equal(o Combo) bool { return slices.Equal(c, o) }

// DirName is the directory (and, with ".env", the file) under a
// dependent's .knotless/needs/NEED/ that holds this run's outputs: the
// values joined by "-", every character but letters, digits and ._+=-
// turned into "_" ("linux-1.22"). Runs of one matrix have distinct
// directory names (a lint error otherwise).
func (c Combo) DirName() string {
	parts := make([]string, len(c))
	for i, v := range c {
		parts[i] = strings.Map(func(r rune) rune {
			if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._+=-", r)) {
				return r
			}
			return '_'
		}, v.Value)
	}
	s := strings.Join(parts, "-")
	if s == "" || s == "." || s == ".." {
		s = "_" + s
	}
	return s
}

// Runs expands the matrix into its combinations, in order: the cartesian
// product of the axes (the first axis varies slowest), less what Exclude
// names, with Include applied. An error says when there are none, or more
// than MaxMatrixRuns.
func (m *Matrix) Runs() ([]Combo, error) {
	var out []Combo
	if len(m.Axes) > 0 {
		out = []Combo{{}}
		for _, a := range m.Axes {
			if len(out)*len(a.Values) > MaxMatrixRuns*MaxMatrixRuns {
				return nil, fmt.Errorf("matrix makes more than %d runs; at most %d", MaxMatrixRuns*MaxMatrixRuns, MaxMatrixRuns)
			}
			next := make([]Combo, 0, len(out)*len(a.Values))
			for _, c := range out {
				for _, v := range a.Values {
					next = append(next, append(slices.Clone(c), MatrixValue{a.Name, v}))
				}
			}
			out = next
		}
		out = slices.DeleteFunc(out, func(c Combo) bool {
			return slices.ContainsFunc(m.Exclude, func(x Combo) bool { return c.has(x) })
		})
	}
	axis := map[string]bool{}
	for _, a := range m.Axes {
		axis[a.Name] = true
	}
	base := len(out)
	for _, inc := range m.Include {
		applied := false
		for i := range out[:base] {
			if !out[i].hasAll(inc, axis) {
				continue
			}
			applied = true
			for _, v := range inc {
				if !axis[v.Name] {
					out[i] = out[i].set(v)
				}
			}
		}
		if !applied {
			out = append(out, slices.Clone(inc))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("matrix makes no run: exclude removes every combination")
	}
	if len(out) > MaxMatrixRuns {
		return nil, fmt.Errorf("matrix makes %d runs; at most %d: list fewer values, or exclude some combinations", len(out), MaxMatrixRuns)
	}
	dirs := map[string]Combo{}
	for _, c := range out {
		if o, dup := dirs[c.DirName()]; dup {
			return nil, fmt.Errorf("matrix runs %s and %s have the same directory name %q for the workflows that need them (values differ only in characters other than letters, digits and ._+=-)", o, c, c.DirName())
		}
		dirs[c.DirName()] = c
	}
	return out, nil
}

// has reports whether c has every value of x.
func (c Combo) has(x Combo) bool {
	for _, v := range x {
		if got, ok := c.Get(v.Name); !ok || got != v.Value {
			return false
		}
	}
	return true
}

// hasAll reports whether c has the values inc gives the axes (its other
// names do not count).
func (c Combo) hasAll(inc Combo, axis map[string]bool) bool {
	for _, v := range inc {
		if axis[v.Name] {
			if got, _ := c.Get(v.Name); got != v.Value {
				return false
			}
		}
	}
	return true
}

// set returns c with v's name set to v's value (added at the end when
// new).
func (c Combo) set(v MatrixValue) Combo {
	for i := range c {
		if c[i].Name == v.Name {
			c[i].Value = v.Value
			return c
		}
	}
	return append(c, v)
}

var matrixKeys = []string{"include", "exclude", "fail-fast"}

// validMatrixName is a name `{{ matrix.NAME }}` can use.
var validMatrixName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// decodeMatrix reads `matrix:`.
func (d *decoder) decodeMatrix(e entry) *Matrix {
	if isNull(e.val) {
		d.errorf(e.kpos, "matrix is empty; list each name's values, e.g. matrix: {go: [\"1.25\", \"1.26\"]}")
		return nil
	}
	es, ok := d.entries(e.val, e.vpos(), "matrix")
	if !ok {
		return nil
	}
	m := &Matrix{}
	var include, exclude *entry
	axes := 0 // names written, good or not
	for _, x := range es {
		switch x.key {
		case "include":
			include = &x
		case "exclude":
			exclude = &x
		case "fail-fast":
			if b, ok := d.boolean(x, "matrix fail-fast"); ok {
				m.FailFast = b
			}
		default:
			axes++
			if !validMatrixName.MatchString(x.key) {
				d.errorf(x.kpos, "matrix name %q: use letters, digits, _ and -, starting with a letter or _ (it is written {{ matrix.NAME }}); the other keys of matrix are %s", x.key, strings.Join(matrixKeys, ", "))
				continue
			}
			items, ok := d.strList(x.val, x.vpos(), "matrix."+x.key, `["1.25", "1.26"]`)
			if !ok {
				continue
			}
			if len(items) == 0 {
				d.errorf(x.vpos(), "matrix.%s has no values", x.key)
				continue
			}
			a := Axis{Name: x.key}
			for _, it := range d.unique(items, "matrix."+x.key) {
				if d.matrixValue(it, "matrix."+x.key) {
					a.Values = append(a.Values, it.s)
				}
			}
			m.Axes = append(m.Axes, a)
		}
	}
	values := map[string][]string{}
	for _, a := range m.Axes {
		values[a.Name] = a.Values
	}
	if exclude != nil {
		m.Exclude = d.matrixEntries(*exclude, "matrix exclude", values, true)
	}
	if include != nil {
		m.Include = d.matrixEntries(*include, "matrix include", values, false)
	}
	if axes == 0 && include == nil {
		d.errorf(e.kpos, "matrix has no values; list each name's values, e.g. matrix: {go: [\"1.25\", \"1.26\"]}")
		return nil
	}
	return m
}

// matrixValue checks one value of a matrix: one line of text.
func (d *decoder) matrixValue(it item, what string) bool {
	if strings.IndexFunc(it.s, unicode.IsControl) >= 0 {
		d.errorf(it.p, "a value of %s must be one line of text", what)
		return false
	}
	return true
}

// matrixEntries reads include or exclude: a list of mappings of names to
// values. An exclude entry may name only axes, with one of their values.
func (d *decoder) matrixEntries(e entry, what string, axes map[string][]string, exclude bool) []Combo {
	if isNull(e.val) {
		return nil
	}
	nodes, ps, ok := d.list(e.val, e.vpos(), what, "[{os: linux, go: \"1.26\"}]")
	if !ok {
		return nil
	}
	var out []Combo
	for i, n := range nodes {
		es, ok := d.entries(n, ps[i], "an entry of "+what)
		if !ok {
			continue
		}
		if len(es) == 0 {
			d.errorf(ps[i], "an entry of %s is empty", what)
			continue
		}
		var c Combo
		good := true
		for _, x := range es {
			values, isAxis := axes[x.key]
			switch {
			case !validMatrixName.MatchString(x.key):
				d.errorf(x.kpos, "matrix name %q in %s: use letters, digits, _ and -, starting with a letter or _", x.key, what)
				good = false
				continue
			case exclude && !isAxis:
				d.errorf(x.kpos, "%s names %q, which is not a name of the matrix (it has: %s)", what, x.key, axisNames(axes))
				good = false
				continue
			}
			s, ok := d.str(x.val, x.vpos(), what+" "+x.key)
			if !ok || !d.matrixValue(item{s, x.vpos()}, what+" "+x.key) {
				good = false
				continue
			}
			if exclude && !slices.Contains(values, s) {
				d.errorf(x.vpos(), "%s: %q is not a value of matrix.%s (it has: %s)", what, s, x.key, strings.Join(values, ", "))
				good = false
				continue
			}
			c = append(c, MatrixValue{x.key, s})
		}
		if good {
			out = append(out, c)
		}
	}
	return out
}

func axisNames(axes map[string][]string) string {
	names := make([]string, 0, len(axes))
	for n := range axes {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// matrixRef is one `{{ matrix.NAME }}` in a string.
var matrixRef = regexp.MustCompile(`\{\{\s*matrix\.([^{}\s]*)\s*\}\}`)

// HasMatrixRef reports whether s uses a `{{ matrix.NAME }}` value.
func HasMatrixRef(s string) bool { return matrixRef.MatchString(s) }

// substMatrix replaces every `{{ matrix.NAME }}` of s (a value read at
// at) by the run's value: an unknown name, or any use where the workflow
// has no matrix or the key cannot vary by run (d.fixed), is an error.
func (d *decoder) substMatrix(s string, at pos, what string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	locs := matrixRef.FindAllStringSubmatchIndex(s, -1)
	if len(locs) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, l := range locs {
		b.WriteString(s[last:l[0]])
		last = l[1]
		name := s[l[2]:l[3]]
		ref := s[l[0]:l[1]]
		kept := "{{matrix." + name + "}}"
		// A reference that cannot be replaced stays, without its spaces,
		// so that nothing else complains about the value it leaves.
		switch {
		case d.fixed != "":
			d.errorf(at, "%s cannot use %s: %s is the same for every run of a matrix", what, ref, d.fixed)
			b.WriteString(kept)
		case d.matrix == nil && d.brokenMatrix:
			// The matrix has errors of its own, reported once.
			b.WriteString(kept)
		case d.matrix == nil:
			d.errorf(at, "%s uses %s but the workflow has no matrix: (add matrix: {%s: [...]})", what, ref, name)
			b.WriteString(kept)
		default:
			// A name only some runs have (include adds it) is empty in
			// the others, as in GitHub Actions; a name none has is a typo.
			v, ok := d.combo.Get(name)
			if !ok && !slices.Contains(d.matrixNames, name) {
				d.errorf(at, "%s uses %s, which the matrix does not define (it has: %s)", what, ref, strings.Join(d.matrixNames, ", "))
				b.WriteString(kept)
				continue
			}
			d.substituted = true
			b.WriteString(v)
		}
	}
	b.WriteString(s[last:])
	return b.String()
}

// matrixEntry finds `matrix:` among the workflow's keys (nil if none).
func (d *decoder) matrixEntry(body ast.Node) *entry {
	m, ok := body.(*ast.MappingNode)
	if !ok {
		if mv, ok := body.(*ast.MappingValueNode); ok {
			m = &ast.MappingNode{Values: []*ast.MappingValueNode{mv}}
		} else {
			return nil
		}
	}
	probe := &decoder{path: d.path, aliases: d.aliases}
	es, _ := probe.entries(m, nodePos(body), "the workflow file")
	for _, e := range es {
		if e.key == "matrix" {
			return &e
		}
	}
	return nil
}
