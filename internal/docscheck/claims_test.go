package docscheck

import (
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// architecture reads docs/architecture.md.
func architecture(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// thinMains is the sentence of docs/architecture.md that says which
// programs are a thin main, and how thin.
var thinMains = regexp.MustCompile("((?:`knotless[a-z-]*`(?:,\\s+|\\s+and\\s+)?)+)\\s+are\\s+a\\s+thin\\s+`main`\\s+\\(one\\s+file\\s+of\\s+at\\s+most\\s+(\\d+)\\s+lines\\s+calling\\s+one\\s+package\\s+of\\s+the\\s+module\\)")

// The programs docs/architecture.md calls a thin main are: their cmd/
// directory holds one Go file besides tests, main.go, of at most the
// lines the page says, which imports one package of the module.
func TestDocs_ArchitectureThinMainsAreThin(t *testing.T) {
	m := thinMains.FindStringSubmatch(architecture(t))
	if m == nil {
		t.Fatal("docs/architecture.md says of no program that it is a thin `main` (one file of at most N lines calling one package of the module)")
	}
	max, _ := strconv.Atoi(m[2])
	progs := regexp.MustCompile("`(knotless[a-z-]*)`").FindAllStringSubmatch(m[1], -1)
	root := moduleRoot(t)
	for _, p := range progs {
		dir := filepath.Join(root, "cmd", p[1])
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Errorf("%s: %v", p[1], err)
			continue
		}
		var files []string
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
				files = append(files, e.Name())
			}
		}
		if len(files) != 1 || files[0] != "main.go" {
			t.Errorf("cmd/%s holds %v, want main.go alone", p[1], files)
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "\n"); n > max {
			t.Errorf("cmd/%s/main.go has %d lines, more than the %d docs/architecture.md says", p[1], n, max)
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "main.go"), data, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		var mod []string
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(path, moduleName+"/") {
				mod = append(mod, path)
			}
		}
		if len(mod) != 1 {
			t.Errorf("cmd/%s/main.go imports %v from the module, want one package", p[1], mod)
		}
	}
	if len(progs) < 2 {
		t.Errorf("%d thin programs found in the sentence, want those it names", len(progs))
	}
}

// Every implementation of store.Store in the module (test files aside)
// is named by its package in docs/architecture.md's section on storage,
// so that the page cannot say one database when there are two.
func TestDocs_ArchitectureNamesEveryStore(t *testing.T) {
	doc := architecture(t)
	i := strings.Index(doc, "### Storage")
	if i < 0 {
		t.Fatal("docs/architecture.md has no section ### Storage")
	}
	section := doc[i+1:]
	if j := strings.Index(section, "\n#"); j >= 0 {
		section = section[:j]
	}
	m := loadModule(t)
	sp := m.pkgs[moduleName+"/internal/store"]
	if sp == nil || sp.types == nil {
		t.Fatal("no package internal/store")
	}
	obj := sp.types.Scope().Lookup("Store")
	if obj == nil {
		t.Fatal("internal/store declares no Store")
	}
	iface := obj.Type().Underlying().(*types.Interface)
	found := 0
	for _, p := range m.order {
		if p.types == nil {
			continue
		}
		for _, name := range p.types.Scope().Names() {
			tn, ok := p.types.Scope().Lookup(name).(*types.TypeName)
			if !ok || tn.IsAlias() {
				continue
			}
			if _, isIface := tn.Type().Underlying().(*types.Interface); isIface {
				continue
			}
			if !hasMethods(types.NewPointer(tn.Type()), iface) {
				continue
			}
			found++
			short := strings.TrimPrefix(p.path, moduleName+"/internal/")
			if !strings.Contains(section, "`"+short+"`") {
				t.Errorf("%s.%s implements store.Store, but docs/architecture.md's section on storage does not name `%s`", short, name, short)
			} else {
				t.Logf("%s.%s implements store.Store and is named", short, name)
			}
		}
	}
	if found == 0 {
		t.Error("no implementation of store.Store found: the test proves nothing")
	}
}

// hasMethods tells whether typ declares, or promotes, a method of every
// name of iface. Not types.Implements: a type that embeds one of another
// module (left empty by the loader, so invalid) would implement anything.
func hasMethods(typ types.Type, iface *types.Interface) bool {
	for i := 0; i < iface.NumMethods(); i++ {
		obj, _, _ := types.LookupFieldOrMethod(typ, true, iface.Method(i).Pkg(), iface.Method(i).Name())
		if _, ok := obj.(*types.Func); !ok {
			return false
		}
	}
	return iface.NumMethods() > 0
}
