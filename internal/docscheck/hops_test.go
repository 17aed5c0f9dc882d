package docscheck

import (
	"fmt"
	"go/types"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// hop is one row of docs/architecture.md's table of a step's bytes.
type hop struct {
	line   int    // in the page
	num    string // the # cell: "N", or "↳ N" for a side branch
	branch bool   // a side branch: it follows the last hop that is none
	file   string // module-relative
	name   string // NAME or TYPE.METHOD
	from   string // how the bytes get here from the hop before (hopLinks)
}

func (h hop) String() string { return fmt.Sprintf("hop %s (%s: %s)", h.num, h.file, h.name) }

// key is the hop's function as a funcKey.
func (h hop) key() funcKey {
	return funcKey(moduleName + "/" + path.Dir(h.file) + "." + h.name)
}

// hopLinks are the words of the table's "from the hop before" column:
// how a step's bytes get from one hop to the next, each with what
// TestDocs_ArchitectureHopsAreTheCode checks of it.
var hopLinks = map[string]string{
	"push":      "the hop before calls this one",
	"pull":      "this hop calls the one before (the bytes come back to it, or go into a writer it gave)",
	"writer":    "this hop is the Write method of a type the hop before makes",
	"channel":   "the hop before sends on a channel; a caller of this hop receives from one of the same element type",
	"io.Reader": "the hop before is the Read method of an io.Reader, which this hop reads through the standard library",
	"file":      "through a file: not traced",
	"socket":    "through a Unix socket, between processes: not traced",
	"exec":      "through an exec stream, between processes: not traced",
	"network":   "through an HTTP request, between processes: not traced",
}

var (
	hopFunc = regexp.MustCompile("^`([a-z0-9_./-]+\\.go): ([A-Za-z0-9_]+(?:\\.[A-Za-z0-9_]+)?)`$")
	hopNum  = regexp.MustCompile(`^(↳ )?([0-9]+)$`)
	goCell  = regexp.MustCompile("`([a-z0-9_./-]+\\.go): ([A-Za-z0-9_]+(?:\\.[A-Za-z0-9_]+)?)`")
)

// hops reads the table marked <!-- hops --> of docs/architecture.md:
// | # | where | file: function | from the hop before | what happens |.
// The functions named in the other cells come as mentions.
func hops(t testing.TB) (main []hop, mentions []hop) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "<!-- hops -->" {
			start = i
		}
	}
	if start < 0 {
		t.Fatal("docs/architecture.md has no table marked <!-- hops -->")
	}
	for i := start + 3; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		cells := strings.Split(strings.Trim(lines[i], "|"), " | ")
		if len(cells) != 5 {
			t.Errorf("docs/architecture.md:%d: %d cells, want 5 (# | where | file: function | from the hop before | what happens)", i+1, len(cells))
			continue
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		n, f := hopNum.FindStringSubmatch(cells[0]), hopFunc.FindStringSubmatch(cells[2])
		if n == nil || f == nil {
			t.Errorf("docs/architecture.md:%d: want `N` or `↳ N` and `FILE: FUNC`, got %q and %q", i+1, cells[0], cells[2])
			continue
		}
		h := hop{line: i + 1, num: cells[0], branch: n[1] != "", file: f[1], name: f[2], from: strings.Trim(cells[3], "`")}
		main = append(main, h)
		for _, m := range goCell.FindAllStringSubmatch(cells[4], -1) {
			mentions = append(mentions, hop{line: i + 1, num: cells[0], file: m[1], name: m[2]})
		}
	}
	return main, mentions
}

// TestDocs_ArchitectureHopsAreTheCode: docs/architecture.md's table of a
// step's bytes is the path the code takes. Every hop (and every function
// the table mentions) is declared in the file it names, and each hop is
// reached from the one before it as its "from the hop before" cell says
// (hopLinks). A side branch (`↳ N`) is checked against the last hop
// before it that is no branch, and the hop after a branch is too.
//
// The rule for "calls" (push, pull, and the caller in writer and
// channel) is the module's static call graph (go/types, callGraph): a
// chain of at most three edges, each a call, a goroutine, a deferred
// call or a use of a function or concrete method as a value; or a chain
// of at most two edges of which one is the call of an interface method,
// which counts as a call of that method of every type of the module
// that has it and implements the interface. The interface edge is what
// a reader follows too, and it is loose: a call of io.Writer's Write
// reaches every Write of the module, hence the shorter chain; with it,
// the runner's writers swapped in the table (the mask after the cap)
// fail. The test logs each chain it found. Links between processes or
// through a file (file, socket, exec, network) are not traced; they are
// named so that a reader knows.
func TestDocs_ArchitectureHopsAreTheCode(t *testing.T) {
	table, mentions := hops(t)
	if len(table) < 15 {
		t.Fatalf("%d hops in the table, want every one of a step's bytes", len(table))
	}
	g := loadGraph(t)
	for _, h := range append(append([]hop(nil), table...), mentions...) {
		if g.decls[h.key()] == nil || g.files[h.key()] != h.file {
			t.Errorf("docs/architecture.md:%d: %s: %s declares no %s", h.line, h, h.file, h.name)
		}
	}
	if t.Failed() {
		return
	}
	var last *hop
	for i := range table {
		h := &table[i]
		if last == nil {
			if h.branch || (h.from != "" && h.from != "—") {
				t.Errorf("docs/architecture.md:%d: the first hop is no branch and comes from nothing (—)", h.line)
			}
			last = h
			continue
		}
		if _, ok := hopLinks[h.from]; !ok {
			t.Errorf("docs/architecture.md:%d: %s: from the hop before %q, want one of %v", h.line, h, h.from, keys(hopLinks))
			continue
		}
		if how, err := g.link(*last, *h); err != nil {
			t.Errorf("docs/architecture.md:%d: %s does not follow %s as %q says (%s): %v", h.line, h, *last, h.from, hopLinks[h.from], err)
		} else {
			t.Logf("%s → %s: %s: %s", last.num, h.num, h.from, how)
		}
		if !h.branch {
			last = h
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return sorted(out)
}

// link checks that the bytes get from a to b as b.from says, and tells how.
func (g *callGraph) link(a, b hop) (string, error) {
	chain := func(p []funcKey) string {
		var s []string
		for _, k := range p {
			s = append(s, strings.TrimPrefix(string(k), moduleName+"/"))
		}
		return strings.Join(s, " → ")
	}
	const maxEdges = 3
	switch b.from {
	case "push":
		if p := g.path(a.key(), b.key(), maxEdges); p != nil {
			return chain(p), nil
		}
		return "", fmt.Errorf("no chain of at most %d calls (%d through an interface) from %s to %s", maxEdges, maxEdges-1, a.name, b.name)
	case "pull":
		if p := g.path(b.key(), a.key(), maxEdges); p != nil {
			return chain(p), nil
		}
		return "", fmt.Errorf("no chain of at most %d calls (%d through an interface) from %s to %s", maxEdges, maxEdges-1, b.name, a.name)
	case "writer":
		typ, method, ok := strings.Cut(b.name, ".")
		if !ok || method != "Write" {
			return "", fmt.Errorf("%s is no Write method", b.name)
		}
		want := moduleName + "/" + path.Dir(b.file) + "." + typ
		// a itself, or a function it calls, makes the writer.
		for _, f := range append([]funcKey{a.key()}, g.edges[a.key()]...) {
			for _, made := range g.makes[f] {
				if made == want {
					return chain([]funcKey{a.key(), f}) + " makes " + typ, nil
				}
			}
		}
		return "", fmt.Errorf("neither %s nor a function it calls makes a %s", a.name, typ)
	case "channel":
		for _, sent := range g.sends[a.key()] {
			for _, c := range g.callers(b.key()) {
				for _, got := range g.recvs[c] {
					if types.Identical(sent, got) {
						return fmt.Sprintf("%s sends a %s, %s receives it and calls %s", a.name, sent, strings.TrimPrefix(string(c), moduleName+"/"), b.name), nil
					}
				}
			}
		}
		return "", fmt.Errorf("%s sends on no channel that a caller of %s receives from", a.name, b.name)
	case "io.Reader":
		typ, method, ok := strings.Cut(a.name, ".")
		if !ok || method != "Read" {
			return "", fmt.Errorf("%s is no Read method", a.name)
		}
		p := g.m.pkgs[moduleName+"/"+path.Dir(a.file)]
		obj := p.types.Scope().Lookup(typ)
		if obj == nil || !implementsReader(obj.Type()) {
			return "", fmt.Errorf("%s is not an io.Reader", typ)
		}
		return typ + " is an io.Reader", nil
	default:
		return "not traced", nil
	}
}

// implementsReader tells whether T or *T has Read([]byte) (int, error).
func implementsReader(t types.Type) bool {
	for _, typ := range []types.Type{t, types.NewPointer(t)} {
		obj, _, _ := types.LookupFieldOrMethod(typ, true, nil, "Read")
		f, ok := obj.(*types.Func)
		if !ok {
			continue
		}
		sig := f.Type().(*types.Signature)
		if sig.Params().Len() == 1 && sig.Results().Len() == 2 &&
			types.Identical(sig.Params().At(0).Type(), types.NewSlice(types.Typ[types.Byte])) &&
			types.Identical(sig.Results().At(0).Type(), types.Typ[types.Int]) &&
			sig.Results().At(1).Type().String() == "error" {
			return true
		}
	}
	return false
}

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}
