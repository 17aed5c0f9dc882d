package docscheck

import (
	"go/ast"
	"go/token"
	"go/types"
	"sort"
	"sync"
	"testing"
)

// funcKey names a function of the module: "IMPORTPATH.Name" or, for a
// method, "IMPORTPATH.Type.Name" (the receiver's type without its *).
type funcKey string

// callGraph is the module's static call graph, as a reader traces it:
// an edge from f to g when f's body (its function literals, goroutines
// and deferred calls included) calls g or uses g as a value (a method
// value or a function handed to another), or calls a method of an
// interface that g, a method of a type of the module, implements.
type callGraph struct {
	m       *module
	decls   map[funcKey]*ast.FuncDecl
	files   map[funcKey]string // module-relative file of each declaration
	edges   map[funcKey][]funcKey
	iface   map[[2]funcKey]bool      // edges that are only an interface method's call
	sends   map[funcKey][]types.Type // element types of the channels f sends on
	recvs   map[funcKey][]types.Type // element types of the channels f receives from
	makes   map[funcKey][]string     // the module's types f makes (T{...}, &T{...}, new(T)), as "IMPORTPATH.T"
	methods map[string][]*types.Func // the module's concrete methods, by name
}

var (
	graphOnce sync.Once
	graph     *callGraph
)

func loadGraph(t testing.TB) *callGraph {
	t.Helper()
	m := loadModule(t)
	graphOnce.Do(func() { graph = newCallGraph(m) })
	return graph
}

// keyOf is f's funcKey; "" for a function of no package (a builtin) or
// a method of an interface.
func keyOf(f *types.Func) funcKey {
	f = f.Origin()
	if f.Pkg() == nil {
		return ""
	}
	sig, _ := f.Type().(*types.Signature)
	if sig == nil || sig.Recv() == nil {
		return funcKey(f.Pkg().Path() + "." + f.Name())
	}
	rt := sig.Recv().Type()
	if p, ok := rt.(*types.Pointer); ok {
		rt = p.Elem()
	}
	n, ok := types.Unalias(rt).(*types.Named)
	if !ok {
		return ""
	}
	if _, isIface := n.Underlying().(*types.Interface); isIface {
		return ""
	}
	return funcKey(f.Pkg().Path() + "." + n.Obj().Name() + "." + f.Name())
}

func newCallGraph(m *module) *callGraph {
	g := &callGraph{m: m, decls: map[funcKey]*ast.FuncDecl{}, files: map[funcKey]string{},
		edges: map[funcKey][]funcKey{}, iface: map[[2]funcKey]bool{}, sends: map[funcKey][]types.Type{}, recvs: map[funcKey][]types.Type{},
		makes: map[funcKey][]string{}, methods: map[string][]*types.Func{}}
	for _, p := range m.order {
		if p.types == nil {
			continue
		}
		scope := p.types.Scope()
		for _, name := range scope.Names() {
			tn, ok := scope.Lookup(name).(*types.TypeName)
			if !ok {
				continue
			}
			n, ok := types.Unalias(tn.Type()).(*types.Named)
			if !ok {
				continue
			}
			if _, isIface := n.Underlying().(*types.Interface); isIface {
				continue
			}
			for i := 0; i < n.NumMethods(); i++ {
				f := n.Method(i)
				g.methods[f.Name()] = append(g.methods[f.Name()], f)
			}
		}
	}
	for _, p := range m.order {
		for i, f := range p.files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				obj, _ := p.info.Defs[fd.Name].(*types.Func)
				if obj == nil {
					continue
				}
				k := keyOf(obj)
				if k == "" {
					continue
				}
				g.decls[k], g.files[k] = fd, p.names[i]
				g.scan(k, p, fd.Body)
			}
		}
	}
	return g
}

// scan adds the edges and channel uses of body to the function k.
func (g *callGraph) scan(k funcKey, p *modPackage, body ast.Node) {
	seen := map[funcKey]bool{}
	add := func(to funcKey, viaIface bool) {
		if to == "" || to == k {
			return
		}
		e := [2]funcKey{k, to}
		if !seen[to] {
			seen[to] = true
			g.edges[k] = append(g.edges[k], to)
			g.iface[e] = viaIface
		} else if !viaIface {
			g.iface[e] = false // a direct call too
		}
	}
	elem := func(e ast.Expr) types.Type {
		if ch, ok := types.Unalias(p.info.TypeOf(e)).(*types.Chan); ok {
			return ch.Elem()
		}
		if ch, ok := p.info.TypeOf(e).(*types.Chan); ok {
			return ch.Elem()
		}
		if p.info.TypeOf(e) != nil {
			if ch, ok := p.info.TypeOf(e).Underlying().(*types.Chan); ok {
				return ch.Elem()
			}
		}
		return nil
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			f, ok := p.info.Uses[n].(*types.Func)
			if !ok {
				return true
			}
			if key := keyOf(f); key != "" {
				add(key, false)
				return true
			}
			if sig, ok := f.Type().(*types.Signature); ok && sig.Recv() != nil {
				iface, ok := sig.Recv().Type().Underlying().(*types.Interface)
				if !ok {
					return true
				}
				for _, impl := range g.methods[f.Name()] {
					rt := impl.Type().(*types.Signature).Recv().Type()
					if p, ok := rt.(*types.Pointer); ok {
						rt = p.Elem()
					}
					if hasMethods(types.NewPointer(rt), iface) && (types.Implements(rt, iface) || types.Implements(types.NewPointer(rt), iface)) {
						add(keyOf(impl), true)
					}
				}
			}
		case *ast.CompositeLit:
			if n, ok := types.Unalias(p.info.TypeOf(n)).(*types.Named); ok && n.Obj().Pkg() != nil {
				g.makes[k] = append(g.makes[k], n.Obj().Pkg().Path()+"."+n.Obj().Name())
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "new" && len(n.Args) == 1 {
				if n, ok := types.Unalias(p.info.TypeOf(n.Args[0])).(*types.Named); ok && n.Obj().Pkg() != nil {
					g.makes[k] = append(g.makes[k], n.Obj().Pkg().Path()+"."+n.Obj().Name())
				}
			}
		case *ast.SendStmt:
			if e := elem(n.Chan); e != nil {
				g.sends[k] = append(g.sends[k], e)
			}
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				if e := elem(n.X); e != nil {
					g.recvs[k] = append(g.recvs[k], e)
				}
			}
		case *ast.RangeStmt:
			if e := elem(n.X); e != nil {
				g.recvs[k] = append(g.recvs[k], e)
			}
		}
		return true
	})
}

// path is a shortest chain from `from` to `to`, both included, of at
// most maxEdges edges, of which at most one an interface method's call,
// and then of at most maxEdges-1 edges (the loosest edge makes the
// chain shorter); nil if there is none.
func (g *callGraph) path(from, to funcKey, maxEdges int) []funcKey {
	type state struct {
		f     funcKey
		iface bool // the chain to f has an interface edge
	}
	prev := map[state]state{{from, false}: {}}
	level := []state{{from, false}}
	for d := 1; d <= maxEdges && len(level) > 0; d++ {
		var next []state
		for _, cur := range level {
			for _, h := range g.edges[cur.f] {
				viaIface := g.iface[[2]funcKey{cur.f, h}]
				if viaIface && (cur.iface || d > maxEdges-1) {
					continue
				}
				st := state{h, cur.iface || viaIface}
				if _, ok := prev[st]; ok {
					continue
				}
				prev[st] = cur
				if h == to {
					var out []funcKey
					for x := st; x.f != ""; x = prev[x] {
						out = append([]funcKey{x.f}, out...)
					}
					return out
				}
				next = append(next, st)
			}
		}
		level = next
	}
	return nil
}

// callers are the functions with an edge to k, sorted.
func (g *callGraph) callers(k funcKey) []funcKey {
	var out []funcKey
	for f, hs := range g.edges {
		for _, h := range hs {
			if h == k {
				out = append(out, f)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
