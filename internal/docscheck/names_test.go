package docscheck

import (
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// codeIndex finds the module's declarations by name: packages by name,
// named types by name, and every name declared at package level, as a
// field or as a method.
type codeIndex struct {
	pkgs     map[string][]*types.Package
	types    map[string][]*types.Named
	declared map[string]bool
}

func newCodeIndex(m *module) *codeIndex {
	x := &codeIndex{pkgs: map[string][]*types.Package{}, types: map[string][]*types.Named{}, declared: map[string]bool{}}
	for _, p := range m.order {
		if p.types == nil {
			continue
		}
		x.pkgs[p.types.Name()] = append(x.pkgs[p.types.Name()], p.types)
		scope := p.types.Scope()
		for _, name := range scope.Names() {
			x.declared[name] = true
			tn, ok := scope.Lookup(name).(*types.TypeName)
			if !ok {
				continue
			}
			n, ok := types.Unalias(tn.Type()).(*types.Named)
			if !ok {
				continue
			}
			x.types[name] = append(x.types[name], n)
			for i := 0; i < n.NumMethods(); i++ {
				x.declared[n.Method(i).Name()] = true
			}
			switch u := n.Underlying().(type) {
			case *types.Struct:
				for i := 0; i < u.NumFields(); i++ {
					x.declared[u.Field(i).Name()] = true
				}
			case *types.Interface:
				for i := 0; i < u.NumMethods(); i++ {
					x.declared[u.Method(i).Name()] = true
				}
			}
		}
	}
	return x
}

// member is the type of typ's field or method named name (unexported
// ones too: looked up from typ's own package).
func member(typ types.Type, name string) (types.Type, bool) {
	var pkg *types.Package
	t := typ
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		pkg = n.Obj().Pkg()
	}
	obj, _, _ := types.LookupFieldOrMethod(typ, true, pkg, name)
	if obj == nil {
		return nil, false
	}
	return obj.Type(), true
}

// resolve tells whether a dotted name, pkg.Name[.Member...] or
// Type.Member[.Member...], names a declaration of the module; known is
// false when its first part is neither a package nor a type of the
// module (an NSID, a Go standard name: not the module's to check).
func (x *codeIndex) resolve(name string) (ok, known bool) {
	parts := strings.Split(name, ".")
	var starts []types.Type
	if pkgs := x.pkgs[parts[0]]; len(pkgs) > 0 && len(parts) > 1 {
		known = true
		for _, p := range pkgs {
			obj := p.Scope().Lookup(parts[1])
			if obj == nil {
				continue
			}
			if len(parts) == 2 {
				return true, true
			}
			if _, isType := obj.(*types.TypeName); isType {
				starts = append(starts, obj.Type())
			}
		}
		parts = parts[1:]
	} else if ts := x.types[parts[0]]; len(ts) > 0 {
		known = true
		for _, t := range ts {
			starts = append(starts, t)
		}
	}
	for _, t := range starts {
		cur, good := t, true
		for _, p := range parts[1:] {
			if cur, good = member(cur, p); !good {
				break
			}
		}
		if good {
			return true, known
		}
	}
	return false, known
}

var (
	backticked  = regexp.MustCompile("`([^`\n]+)`")
	dottedName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$`)
	exported    = regexp.MustCompile(`^[A-Z][A-Za-z0-9_]*$`)
	repoPath    = regexp.MustCompile(`^[a-z0-9_.-]+(/[a-z0-9_.-]+)*/?$`)
	hopSpan     = regexp.MustCompile(`^[a-z0-9_./-]+\.go: `)
	stateReason = regexp.MustCompile(`^(succeeded|failed|errored|cancelled)/[a-z-]+$`)
)

// staleNames are the names page (a file of docs/, e.g. architecture.md) writes in backticks
// (outside its fenced blocks) that the code does not declare:
//   - a dotted name (`pkg.Name`, `Type.Method`, `pkg.Type.Field`) whose
//     first part is a package or a type of the module must resolve
//     through go/types (other dotted names, NSIDs and the like, pass);
//   - an exported name alone (`Prepare`, `ErrNotFound`) must be declared
//     somewhere in the module (package level, a field or a method), or be
//     a test of it, or a frame of the agent protocol (`Hello` is
//     agent.TypeHello);
//   - a path (`server/receivepack.go`, `internal/store`, `sqlite/migrations/`)
//     must be a file or directory of the repository, from its root or
//     from any directory of it.
//
// It returns "LINE: NAME: why" for each.
func staleNames(t testing.TB, page string) (stale []string, checked int) {
	t.Helper()
	root := moduleRoot(t)
	x := newCodeIndex(loadModule(t))
	var paths []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		paths = append(paths, filepath.ToSlash(rel))
		return nil
	})
	pathExists := func(p string) bool {
		p = strings.TrimSuffix(p, "/")
		for _, q := range paths {
			if q == p || strings.HasSuffix(q, "/"+p) {
				return true
			}
		}
		return false
	}
	tests := map[string]bool{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(filepath.Join(root, p))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
				tests[m[1]] = true
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	for n, line := range proseLines(string(data)) {
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			span := strings.TrimSuffix(m[1], "()")
			where := func(why string) string { return fmt.Sprintf("%d: %s: %s", n, m[1], why) }
			switch {
			case strings.Contains(m[1], "*"):
				// a pattern (api.Method*, KNOTLESS_*)
			case stateReason.MatchString(span):
				// a run's state and reason (errored/runner-lost), not a path
			case hopSpan.MatchString(span):
				// a hop: TestDocs_ArchitectureHopsAreTheCode's
			case dottedName.MatchString(span) && !strings.HasSuffix(span, ".go"):
				ok, known := x.resolve(span)
				if known {
					checked++
					if !ok {
						stale = append(stale, where("no such declaration"))
					}
				}
			case exported.MatchString(span):
				checked++
				if !x.declared[span] && !x.declared["Type"+span] && !tests[span] {
					stale = append(stale, where("declared nowhere in the module"))
				}
			case repoPath.MatchString(span) && strings.ContainsAny(span, "/."):
				checked++
				if !pathExists(span) {
					stale = append(stale, where("no such file or directory"))
				}
			}
		}
	}
	return stale, checked
}

// Every Go name and path docs/architecture.md writes in backticks is the
// code's (staleNames has the rules): the page is read with the code
// open, and a name that moved or never was sends the reader nowhere.
func TestDocs_ArchitectureNamesAreTheCode(t *testing.T) {
	checkNames(t, "architecture.md", 50)
}

// Every Go name and path the glossary writes in backticks is the code's,
// as for the architecture (staleNames): each word's meaning is given with
// the function that does it, and a renamed function would leave the word
// without its home.
func TestDocs_GlossaryNamesAreTheCode(t *testing.T) {
	checkNames(t, "glossary.md", 30)
}

// checkNames fails for each stale name of docs/page (staleNames), and
// when fewer than least names were checked (the page lost its names, or
// the rules stopped reading them).
func checkNames(t *testing.T, page string, least int) {
	stale, checked := staleNames(t, page)
	for _, s := range stale {
		t.Errorf("docs/%s:%s", page, s)
	}
	if checked < least {
		t.Errorf("%d names checked, want the page's names", checked)
	}
	t.Logf("%d names checked", checked)
}
