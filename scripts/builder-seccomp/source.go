package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
)

const containerdModule = "github.com/containerd/containerd/v2"

// ArchBranch is what containerd's DefaultProfile gives one GOARCH beyond
// the rules common to all: its seccomp architectures (arches()) and the
// names of its one rule of arch-specific syscalls, allowed without
// arguments ("include by arch").
type ArchBranch struct {
	Architectures []specs.Arch
	Syscalls      []string
}

// ContainerdArm64 reads containerd's arm64 branch from the source of the
// containerd module this module requires (contrib/seccomp/
// seccomp_default.go in the module cache, found with `go list -m` in the
// working directory, which must be this module's): DefaultProfile's arm64
// code cannot run on amd64, so its source is the oracle. Errors: the
// source is not found, or not in the shape this reads (a switch on
// runtime.GOARCH in arches() returning []specs.Arch{...}, and one in
// DefaultProfile appending one rule with Names []string{...} and
// ActAllow).
func ContainerdArm64() (ArchBranch, error) { return containerdArch("arm64") }

func containerdArch(goarch string) (ArchBranch, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", containerdModule)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return ArchBranch{}, fmt.Errorf("find %s's source (go list -m, in scripts/builder-seccomp): %w: %s", containerdModule, err, strings.TrimSpace(stderr.String()))
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "contrib", "seccomp", "seccomp_default.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return ArchBranch{}, fmt.Errorf("read containerd's profile source: %w", err)
	}
	var b ArchBranch
	var found []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || (fn.Name.Name != "arches" && fn.Name.Name != "DefaultProfile") {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok || !slices.ContainsFunc(cc.List, func(e ast.Expr) bool { return isString(e, goarch) }) {
				return true
			}
			found = append(found, fn.Name.Name)
			switch fn.Name.Name {
			case "arches":
				b.Architectures, err = archesOf(cc.Body)
			case "DefaultProfile":
				b.Syscalls, err = namesOf(cc.Body)
			}
			return false
		})
		if err != nil {
			return ArchBranch{}, fmt.Errorf("%s: %s's %s branch: %w", path, fn.Name.Name, goarch, err)
		}
	}
	if !slices.Equal(found, []string{"arches", "DefaultProfile"}) || len(b.Architectures) == 0 || len(b.Syscalls) == 0 {
		return ArchBranch{}, fmt.Errorf("%s: want one %s branch in arches() and one in DefaultProfile, found them in %v: read containerd's source again and change scripts/builder-seccomp", path, goarch, found)
	}
	return b, nil
}

// archesOf reads `return []specs.Arch{specs.ArchARM, ...}`.
func archesOf(body []ast.Stmt) ([]specs.Arch, error) {
	known := map[string]specs.Arch{
		"ArchX86": specs.ArchX86, "ArchX86_64": specs.ArchX86_64, "ArchX32": specs.ArchX32,
		"ArchARM": specs.ArchARM, "ArchAARCH64": specs.ArchAARCH64,
	}
	if len(body) != 1 {
		return nil, fmt.Errorf("want one return statement, found %d statements", len(body))
	}
	ret, ok := body[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return nil, fmt.Errorf("want return []specs.Arch{...}")
	}
	lit, ok := ret.Results[0].(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("want return []specs.Arch{...}")
	}
	var arches []specs.Arch
	for _, e := range lit.Elts {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || known[sel.Sel.Name] == "" {
			return nil, fmt.Errorf("an architecture this does not know: %#v", e)
		}
		arches = append(arches, known[sel.Sel.Name])
	}
	return arches, nil
}

// namesOf reads `s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names:
// []string{...}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{}})`.
func namesOf(body []ast.Stmt) ([]string, error) {
	if len(body) != 1 {
		return nil, fmt.Errorf("want one statement, found %d", len(body))
	}
	as, ok := body[0].(*ast.AssignStmt)
	if !ok || len(as.Rhs) != 1 {
		return nil, fmt.Errorf("want s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{...})")
	}
	call, ok := as.Rhs[0].(*ast.CallExpr)
	if !ok || len(call.Args) != 2 {
		return nil, fmt.Errorf("want append of one rule")
	}
	rule, ok := call.Args[1].(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("want append of one specs.LinuxSyscall{...}")
	}
	var names []string
	for _, e := range rule.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			return nil, fmt.Errorf("want keyed fields")
		}
		switch key := kv.Key.(*ast.Ident).Name; key {
		case "Names":
			lit, ok := kv.Value.(*ast.CompositeLit)
			if !ok {
				return nil, fmt.Errorf("want Names: []string{...}")
			}
			for _, n := range lit.Elts {
				bl, ok := n.(*ast.BasicLit)
				if !ok || bl.Kind != token.STRING {
					return nil, fmt.Errorf("want string literals in Names")
				}
				s, _ := strconv.Unquote(bl.Value)
				names = append(names, s)
			}
		case "Action":
			if sel, ok := kv.Value.(*ast.SelectorExpr); !ok || sel.Sel.Name != "ActAllow" {
				return nil, fmt.Errorf("want Action: specs.ActAllow")
			}
		case "Args":
			if lit, ok := kv.Value.(*ast.CompositeLit); !ok || len(lit.Elts) != 0 {
				return nil, fmt.Errorf("want no Args")
			}
		default:
			return nil, fmt.Errorf("a field this does not know: %s", key)
		}
	}
	return names, nil
}

func isString(e ast.Expr, s string) bool {
	bl, ok := e.(*ast.BasicLit)
	return ok && bl.Kind == token.STRING && bl.Value == strconv.Quote(s)
}
