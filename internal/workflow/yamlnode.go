package workflow

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// This file turns goccy/go-yaml's AST into what the schema code needs:
// positions as a reader sees them, anchors and aliases looked through,
// mappings as ordered entries (merge keys applied, duplicates reported)
// and scalars as text.

// pos is a 1-based line and column (columns count characters).
type pos struct{ line, col int }

func (p pos) String() string { return fmt.Sprintf("%d:%d", p.line, p.col) }

// isNil is true for a nil interface and for an interface holding a nil
// pointer, which the parser sometimes produces.
func isNil(n ast.Node) bool {
	if n == nil {
		return true
	}
	v := reflect.ValueOf(n)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func tokenPos(tk *token.Token) pos {
	if tk == nil || tk.Position == nil || tk.Position.Line < 1 {
		return pos{1, 1}
	}
	return pos{tk.Position.Line, max(tk.Position.Column, 1)}
}

// nodePos is where a reader sees n begin: the first key of a block
// mapping, the '-' or '[' of a sequence, the '&' of an anchor, ...
func nodePos(n ast.Node) pos {
	if isNil(n) {
		return pos{1, 1}
	}
	switch v := n.(type) {
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 && !isNil(v.Values[0]) {
			return nodePos(v.Values[0])
		}
		return tokenPos(v.Start)
	case *ast.MappingValueNode:
		if isNil(v.Key) {
			return tokenPos(v.Start)
		}
		return nodePos(v.Key)
	case *ast.SequenceNode:
		return tokenPos(v.Start)
	case *ast.AnchorNode:
		return tokenPos(v.Start)
	case *ast.AliasNode:
		return tokenPos(v.Start)
	case *ast.TagNode:
		return tokenPos(v.Start)
	case *ast.LiteralNode:
		return tokenPos(v.Start)
	case *ast.MappingKeyNode:
		return tokenPos(v.Start)
	}
	return tokenPos(n.GetToken())
}

// isImplicitNull is true for a value left empty ("key:" with nothing).
func isImplicitNull(n ast.Node) bool {
	v, ok := n.(*ast.NullNode)
	return ok && v != nil && v.Token != nil && v.Token.Type == token.ImplicitNullType
}

// Limits that keep hostile input cheap.
const (
	maxDepth         = 100     // nesting of mappings and sequences
	maxExpandedNodes = 1000000 // nodes after expanding aliases
)

// prepare walks the document once as written: it records which anchor
// each alias names (the latest one before it), reports unknown aliases,
// aliases inside their own anchor, unsupported tags and too deep nesting,
// and then refuses documents whose aliases expand to too many nodes.
// It reports false if decoding must not go on.
func (d *decoder) prepare(root ast.Node) bool {
	d.aliases = map[*ast.AliasNode]*ast.AnchorNode{}
	current := map[string]*ast.AnchorNode{}
	open := map[*ast.AnchorNode]bool{}
	ok := true
	var walk func(n ast.Node, depth int)
	walk = func(n ast.Node, depth int) {
		if isNil(n) || !ok {
			return
		}
		if depth > maxDepth {
			d.errorf(nodePos(n), "nesting is deeper than %d levels", maxDepth)
			ok = false
			return
		}
		switch v := n.(type) {
		case *ast.MappingNode:
			for _, mv := range v.Values {
				walk(mv, depth+1)
			}
		case *ast.MappingValueNode:
			walk(v.Key, depth)
			walk(v.Value, depth)
		case *ast.MappingKeyNode:
			walk(v.Value, depth)
		case *ast.SequenceNode:
			for _, e := range v.Values {
				walk(e, depth+1)
			}
		case *ast.AnchorNode:
			current[scalarName(v.Name)] = v
			open[v] = true
			walk(v.Value, depth)
			delete(open, v)
		case *ast.AliasNode:
			name := scalarName(v.Value)
			a := current[name]
			switch {
			case a == nil:
				d.errorf(nodePos(v), "alias *%s names no anchor defined before it (&%s)", name, name)
			case open[a]:
				d.errorf(nodePos(v), "alias *%s is inside the node it refers to", name)
				ok = false
			default:
				d.aliases[v] = a
			}
		case *ast.TagNode:
			if _, known := knownTags[tagName(v)]; !known {
				d.errorf(nodePos(v), "unsupported tag %s; only !!str, !!int, !!float, !!bool, !!null, !!map and !!seq are allowed", tagName(v))
			}
			walk(v.Value, depth)
		}
	}
	walk(root, 0)
	if !ok {
		return false
	}
	sizes := map[*ast.AnchorNode]int{}
	var size func(n ast.Node, depth int) int
	size = func(n ast.Node, depth int) int {
		if isNil(n) || depth > 2*maxDepth {
			return 1
		}
		total := 1
		add := func(k int) { total = min(total+k, maxExpandedNodes+1) }
		switch v := n.(type) {
		case *ast.MappingNode:
			for _, mv := range v.Values {
				add(size(mv, depth+1))
			}
		case *ast.MappingValueNode:
			add(size(v.Key, depth+1))
			add(size(v.Value, depth+1))
		case *ast.MappingKeyNode:
			add(size(v.Value, depth+1))
		case *ast.SequenceNode:
			for _, e := range v.Values {
				add(size(e, depth+1))
			}
		case *ast.AnchorNode:
			if s, seen := sizes[v]; seen {
				return s
			}
			add(size(v.Value, depth+1))
			sizes[v] = total
		case *ast.AliasNode:
			if a := d.aliases[v]; a != nil {
				add(size(a, depth+1))
			}
		case *ast.TagNode:
			add(size(v.Value, depth+1))
		}
		return total
	}
	if size(root, 0) > maxExpandedNodes {
		d.errorf(nodePos(root), "aliases expand to more than %d nodes", maxExpandedNodes)
		return false
	}
	return true
}

var knownTags = map[string]struct{}{
	"!!str": {}, "!!int": {}, "!!float": {}, "!!bool": {}, "!!null": {}, "!!map": {}, "!!seq": {},
}

func tagName(t *ast.TagNode) string {
	if t == nil || t.Start == nil {
		return ""
	}
	return t.Start.Value
}

func scalarName(n ast.Node) string {
	if isNil(n) {
		return ""
	}
	if s, ok := n.(*ast.StringNode); ok {
		return s.Value
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

// deref looks through anchors, aliases and tags. It returns nil for an
// alias that names no anchor (already reported by prepare). A !!str tag
// turns a scalar into a string node holding the scalar's text.
func (d *decoder) deref(n ast.Node) ast.Node {
	for range 2 * maxDepth {
		if isNil(n) {
			return nil
		}
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			a := d.aliases[v]
			if a == nil {
				return nil
			}
			n = a
		case *ast.TagNode:
			inner := d.deref(v.Value)
			if tagName(v) == "!!str" && !isNil(inner) {
				if text, ok := scalarText(inner); ok {
					return &ast.StringNode{BaseNode: &ast.BaseNode{}, Token: inner.GetToken(), Value: text}
				}
			}
			return inner
		default:
			return n
		}
	}
	return nil
}

// scalarText is the text of a scalar as written (strings unquoted).
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value == nil {
			return "", true
		}
		return v.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		if tk := n.GetToken(); tk != nil {
			return tk.Value, true
		}
	}
	return "", false
}

// kind names what a node is, for messages.
func kind(n ast.Node) string {
	switch n.(type) {
	case nil:
		return "nothing"
	case *ast.NullNode:
		return "null"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	}
	return "an unsupported YAML node"
}

// entry is one key of a mapping with its value (nil = no value).
type entry struct {
	key  string
	kpos pos
	val  ast.Node // dereferenced; nil for an unknown alias
	raw  ast.Node // as written, for positions
}

// vpos is where the entry's value starts, or the key for an empty value.
func (e entry) vpos() pos {
	if isNil(e.raw) || isImplicitNull(e.raw) {
		return e.kpos
	}
	return nodePos(e.raw)
}

// isNull is true for an empty value, "~" or "null".
func isNull(n ast.Node) bool {
	_, ok := n.(*ast.NullNode)
	return ok
}

// entries returns the keys of mapping n in file order, with merge keys
// ("<<: *base") applied: keys written in the mapping win over merged ones.
// Duplicate keys are reported. what names the mapping for messages.
func (d *decoder) entries(n ast.Node, at pos, what string) ([]entry, bool) {
	return d.entriesDepth(n, at, what, 0)
}

func (d *decoder) entriesDepth(n ast.Node, at pos, what string, depth int) ([]entry, bool) {
	if isNil(n) {
		return nil, false // an unknown alias, already reported
	}
	var pairs []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		pairs = v.Values
		d.work += len(pairs)
	case *ast.MappingValueNode:
		pairs = []*ast.MappingValueNode{v}
	default:
		d.errorf(at, "%s must be a mapping (key: value); got %s", what, kind(n))
		return nil, false
	}
	if depth > maxDepth {
		d.errorf(at, "merge keys nest deeper than %d levels", maxDepth)
		return nil, false
	}
	var out []entry
	seen := map[string]pos{}
	var merged [][]entry
	var mergeAt []int
	for _, mv := range pairs {
		if isNil(mv) || isNil(mv.Key) {
			continue
		}
		if mv.Key.IsMergeKey() {
			ms := d.mergeSources(mv.Value, nodePos(mv.Key), what, depth)
			merged = append(merged, ms)
			mergeAt = append(mergeAt, len(out))
			continue
		}
		kp := nodePos(mv.Key)
		key, ok := d.keyText(mv.Key)
		if !ok {
			d.errorf(kp, "keys in %s must be plain strings", what)
			continue
		}
		if first, dup := seen[key]; dup {
			d.errorf(kp, "duplicate key %q in %s (first at %s)", key, what, first)
			continue
		}
		seen[key] = kp
		out = append(out, entry{key: key, kpos: kp, val: d.deref(mv.Value), raw: mv.Value})
	}
	if len(merged) == 0 {
		return out, true
	}
	// Insert merged keys where the "<<" stood; earlier sources win.
	var res []entry
	next := 0
	for i, ms := range merged {
		res = append(res, out[next:mergeAt[i]]...)
		next = mergeAt[i]
		for _, e := range ms {
			if _, dup := seen[e.key]; dup {
				continue
			}
			seen[e.key] = e.kpos
			res = append(res, e)
		}
	}
	return append(res, out[next:]...), true
}

// mergeSources is the entries a "<<" value brings: one mapping or a list
// of mappings.
func (d *decoder) mergeSources(raw ast.Node, at pos, what string, depth int) []entry {
	v := d.deref(raw)
	if seq, ok := v.(*ast.SequenceNode); ok {
		var all []entry
		for _, item := range seq.Values {
			es, _ := d.entriesDepth(d.deref(item), nodePos(item), "a merge (<<) source", depth+1)
			all = append(all, es...)
		}
		return all
	}
	if isNil(v) {
		return nil
	}
	es, _ := d.entriesDepth(v, at, "a merge (<<) value in "+what, depth+1)
	return es
}

func (d *decoder) keyText(k ast.Node) (string, bool) {
	if mk, ok := k.(*ast.MappingKeyNode); ok {
		k = mk.Value
	}
	v := d.deref(k)
	if isNil(v) {
		return "", false
	}
	if _, ok := v.(*ast.NullNode); ok {
		return "", false
	}
	return scalarText(v)
}

// str reads a string value. Numbers and booleans are refused with a hint
// to quote them, so that "0" and "1.10" reach a step exactly as written.
func (d *decoder) str(n ast.Node, at pos, what string) (string, bool) {
	if isNil(n) {
		return "", false // an unknown alias, already reported
	}
	switch v := n.(type) {
	case *ast.StringNode:
		return d.substMatrix(v.Value, at, what), true
	case *ast.LiteralNode:
		t, _ := scalarText(v)
		return d.substMatrix(t, at, what), true
	case *ast.NullNode:
		d.errorf(at, "%s has no value; expected a string", what)
		return "", false
	}
	if text, ok := scalarText(n); ok {
		d.errorf(at, "%s must be a string; got %s, quote it: %s", what, kind(n), strconv.Quote(text))
		return "", false
	}
	d.errorf(at, "%s must be a string; got %s", what, kind(n))
	return "", false
}

// item is a list element or a value with its position.
type item struct {
	s string
	p pos
}

// list reads a list (nil value = empty, ok) and returns its elements,
// dereferenced, with positions.
func (d *decoder) list(n ast.Node, at pos, what, example string) ([]ast.Node, []pos, bool) {
	if isNil(n) {
		return nil, nil, false // an unknown alias, already reported
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.errorf(at, "%s must be a list, like %s; got %s", what, example, kind(n))
		return nil, nil, false
	}
	d.work += len(seq.Values)
	nodes := make([]ast.Node, 0, len(seq.Values))
	ps := make([]pos, 0, len(seq.Values))
	for i, raw := range seq.Values {
		p := nodePos(raw)
		if isImplicitNull(raw) {
			// An empty "-" entry: point at its dash.
			p = tokenPos(seq.Start)
			if len(seq.Entries) == len(seq.Values) && !isNil(seq.Entries[i]) {
				p = tokenPos(seq.Entries[i].Start)
			}
		}
		nodes = append(nodes, d.deref(raw))
		ps = append(ps, p)
	}
	return nodes, ps, true
}

// strList reads a list of non-empty strings.
func (d *decoder) strList(n ast.Node, at pos, what, example string) ([]item, bool) {
	nodes, ps, ok := d.list(n, at, what, example)
	if !ok {
		return nil, false
	}
	out := make([]item, 0, len(nodes))
	for i, v := range nodes {
		s, ok := d.str(v, ps[i], "an entry of "+what)
		if !ok {
			continue
		}
		if s == "" {
			d.errorf(ps[i], "an entry of %s is empty", what)
			continue
		}
		if !d.shown(ps[i], "an entry of "+what, s) {
			continue
		}
		out = append(out, item{s, ps[i]})
	}
	return out, true
}
