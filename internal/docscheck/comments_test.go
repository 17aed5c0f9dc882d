package docscheck

import (
	"fmt"
	"go/ast"
	"go/types"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var (
	// docLink is a Go doc link: [Name], [Name.Member], [pkg.Name],
	// [pkg.Name.Member], not after a word (an index, buf[n]) and not a
	// Markdown-style link ([text](url)) or link definition ([text]: url).
	docLink = regexp.MustCompile(`(^|[^\w\]])\[(\*?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){0,2})\]([^(:]|$)`)
	// typeMember is prose naming Type.Member.
	typeMember = regexp.MustCompile(`(^|[^\w.])([A-Za-z_]\w*)\.([A-Za-z_]\w*)\b`)
)

// staleComments are the comments of the module's non-test Go code that
// name what does not exist, as "file:line: name: why":
//   - a doc link ([Name], [Type.Method], [pkg.Name], [pkg.Type.Method],
//     https://go.dev/doc/comment#doclinks) that does not resolve, pkg
//     being a package the file imports or one of the module;
//   - prose Type.Member where Type is a type of the comment's own
//     package and it has no field or method Member.
func staleComments(t testing.TB) (stale []string, checked int) {
	t.Helper()
	m := loadModule(t)
	x := newCodeIndex(m)
	for _, p := range m.order {
		if p.types == nil {
			continue
		}
		scope := p.types.Scope()
		for fi, f := range p.files {
			imports := map[string]*types.Package{}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				var pkg *types.Package
				for _, q := range p.types.Imports() {
					if q.Path() == path {
						pkg = q
					}
				}
				if pkg == nil {
					continue
				}
				name := pkg.Name()
				if imp.Name != nil {
					name = imp.Name.Name
				}
				imports[name] = pkg
			}
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					line := m.fset.Position(c.Pos()).Line
					for li, text := range strings.Split(c.Text, "\n") {
						where := func(name, why string) string {
							return fmt.Sprintf("%s:%d: %s: %s", p.names[fi], line+li, name, why)
						}
						for _, mm := range docLink.FindAllStringSubmatch(text, -1) {
							name := strings.TrimPrefix(mm[2], "*")
							ok, known := resolveLink(name, scope, imports, x)
							if !known {
								continue
							}
							checked++
							if !ok {
								stale = append(stale, where("["+mm[2]+"]", "a doc link that resolves to nothing"))
							}
						}
						for _, mm := range typeMember.FindAllStringSubmatch(text, -1) {
							tn, ok := scope.Lookup(mm[2]).(*types.TypeName)
							if !ok {
								continue
							}
							if _, isImport := imports[mm[2]]; isImport {
								continue
							}
							if fileExt[mm[3]] {
								continue // a file name: stream.go
							}
							checked++
							if _, ok := member(addressable(tn.Type()), mm[3]); !ok {
								stale = append(stale, where(mm[2]+"."+mm[3], fmt.Sprintf("%s has no field or method %s", mm[2], mm[3])))
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(stale)
	return stale, checked
}

// resolveLink resolves a doc link's name from a file's package scope
// and imports; known is false when its first part is neither a name of
// the package nor an imported package (a link godoc does not resolve
// either, or plain text in brackets).
func resolveLink(name string, scope *types.Scope, imports map[string]*types.Package, x *codeIndex) (ok, known bool) {
	parts := strings.Split(name, ".")
	lookup := func(s *types.Scope, rest []string) bool {
		obj := s.Lookup(rest[0])
		if obj == nil {
			return false
		}
		if len(rest) == 1 {
			return true
		}
		if _, isType := obj.(*types.TypeName); !isType || len(rest) > 2 {
			return false
		}
		_, ok := member(addressable(obj.Type()), rest[1])
		return ok
	}
	if obj := scope.Lookup(parts[0]); obj != nil {
		return lookup(scope, parts), true
	}
	if len(parts) == 1 && types.Universe.Lookup(parts[0]) != nil {
		return true, true
	}
	if pkg := imports[parts[0]]; pkg != nil && len(parts) > 1 {
		if !pkg.Complete() || pkg.Scope().Len() == 0 {
			return false, false // another module's: not loaded
		}
		return lookup(pkg.Scope(), parts[1:]), true
	}
	if len(parts) > 1 {
		for _, pkg := range x.pkgs[parts[0]] {
			if lookup(pkg.Scope(), parts[1:]) {
				return true, true
			}
		}
		if len(x.pkgs[parts[0]]) > 0 {
			return false, true
		}
	}
	if len(parts) == 1 && ast.IsExported(parts[0]) {
		return false, true // [Name] of this package that it does not declare
	}
	return false, false
}

// Every doc link in a comment of the module's code resolves, and every
// Type.Member a comment names of a type of its own package exists
// (staleComments): a comment that names a method that never was (a
// Client.Hello) sends its reader nowhere.
//
// knownStale are those found in files of others (issue 35), by file and
// name, each with its fix; an entry no longer stale fails, so that the
// list is emptied.
func TestCode_CommentsNameWhatExists(t *testing.T) {
	stale, checked := staleComments(t)
	found := map[string]bool{}
	for _, s := range stale {
		parts := strings.SplitN(s, ": ", 3) // FILE:LINE, NAME, why
		file, _, _ := strings.Cut(parts[0], ":")
		key := file + ": " + parts[1]
		found[key] = true
		if fix, ok := knownStale[key]; ok {
			t.Logf("known: %s (fix: %s)", s, fix)
			continue
		}
		t.Error(s)
	}
	for key := range knownStale {
		if !found[key] {
			t.Errorf("knownStale names %s, which is no longer stale: remove it", key)
		}
	}
	t.Logf("%d names in comments checked, %d stale", checked, len(stale))
}

var knownStale = map[string]string{}

// fileExt are the extensions of the repository's files, which prose
// Name.ext is a file name with.
var fileExt = map[string]bool{"go": true, "md": true, "yaml": true, "yml": true, "json": true, "jsonl": true,
	"txt": true, "log": true, "times": true, "raw": true, "tar": true, "sh": true, "mod": true, "sum": true}

// addressable is *T for a concrete type T (whose method set then holds
// its pointer methods too), T itself for an interface.
func addressable(t types.Type) types.Type {
	if types.IsInterface(t) {
		return t
	}
	return types.NewPointer(t)
}
