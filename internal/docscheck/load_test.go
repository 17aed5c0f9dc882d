package docscheck

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// module is the module's non-test Go code (test/ aside: its packages are
// tests' helpers), parsed and type-checked from source without building
// anything: module packages from their files, the standard library from
// GOROOT's sources, other modules as empty packages (a use of them is a
// type error the checks ignore: no hop, name or comment they hold is
// declared outside the module).
type module struct {
	root, path string
	fset       *token.FileSet
	pkgs       map[string]*modPackage // by import path
	order      []*modPackage          // sorted by import path
}

// modPackage is one package of the module, checked.
type modPackage struct {
	path, dir string // import path; directory, module-relative
	files     []*ast.File
	names     []string // the files' module-relative paths, as files
	types     *types.Package
	info      *types.Info
}

var (
	loadOnce   sync.Once
	loaded     *module
	loadErr    error
	moduleName = "knotless.dev/knotless"
)

// loadModule loads the module once per test binary.
func loadModule(t testing.TB) *module {
	t.Helper()
	loadOnce.Do(func() {
		// The go command's GOROOT: a test binary built with -trimpath
		// (make test's GOFLAGS) does not know its own, and go/build would
		// then find no standard library.
		out, err := exec.Command(goTool(t), "env", "GOROOT").Output()
		if err != nil {
			loadErr = fmt.Errorf("go env GOROOT: %w", err)
			return
		}
		loaded, loadErr = load(moduleRoot(t), strings.TrimSpace(string(out)))
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

// load reads the module at root, the standard library from goroot's
// sources. Its error says the standard library cannot be read (every
// interface edge of the checks would be missing, and they would fail for
// the wrong reason) or a file of the module does not parse.
func load(root, goroot string) (*module, error) {
	m := &module{root: root, path: moduleName, fset: token.NewFileSet(), pkgs: map[string]*modPackage{}}
	build.Default.CgoEnabled = false // the pure-Go standard library; nothing to run cgo on
	build.Default.GOROOT = goroot
	ctx := build.Default
	std := importer.ForCompiler(m.fset, "source", nil).(types.ImporterFrom)
	if _, err := std.ImportFrom("io", root, 0); err != nil {
		return nil, fmt.Errorf("the standard library's sources in %s cannot be read: %w", goroot, err)
	}
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == "test" || rel == ".git" || d.Name() == "testdata" || (rel != "." && strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		dirs = append(dirs, rel)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, rel := range dirs {
		bp, err := ctx.ImportDir(filepath.Join(root, rel), 0)
		if err != nil || len(bp.GoFiles) == 0 {
			continue
		}
		p := &modPackage{path: path.Join(m.path, rel), dir: rel}
		if rel == "." {
			p.path = m.path
		}
		for _, f := range bp.GoFiles {
			name := path.Join(rel, f)
			af, err := parser.ParseFile(m.fset, filepath.Join(root, name), nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			p.files, p.names = append(p.files, af), append(p.names, name)
		}
		m.pkgs[p.path] = p
	}
	var check func(p *modPackage) *types.Package
	imp := importerFunc(func(ipath string) (*types.Package, error) {
		if p := m.pkgs[ipath]; p != nil {
			return check(p), nil
		}
		if !strings.Contains(strings.Split(ipath, "/")[0], ".") {
			return std.ImportFrom(ipath, root, 0)
		}
		fake := types.NewPackage(ipath, guessName(ipath))
		fake.MarkComplete()
		return fake, nil
	})
	check = func(p *modPackage) *types.Package {
		if p.types != nil {
			return p.types
		}
		p.info = &types.Info{
			Types: map[ast.Expr]types.TypeAndValue{},
			Defs:  map[*ast.Ident]types.Object{},
			Uses:  map[*ast.Ident]types.Object{},
		}
		conf := types.Config{Importer: imp, Error: func(error) {}, FakeImportC: true}
		p.types, _ = conf.Check(p.path, m.fset, p.files, p.info)
		return p.types
	}
	for _, p := range m.pkgs {
		check(p)
		m.order = append(m.order, p)
	}
	sort.Slice(m.order, func(i, j int) bool { return m.order[i].path < m.order[j].path })
	return m, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// guessName is the usual package name of an import path outside the
// module: its last element without a version suffix or a "go-" prefix.
func guessName(ipath string) string {
	elems := strings.Split(ipath, "/")
	name := elems[len(elems)-1]
	if len(elems) > 1 && len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = elems[len(elems)-2]
	}
	name, _, _ = strings.Cut(name, ".")
	name = strings.TrimPrefix(name, "go-")
	return strings.ReplaceAll(name, "-", "")
}
