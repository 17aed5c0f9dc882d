package workflow

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"text/template"
	tparse "text/template/parse"

	"github.com/goccy/go-yaml/ast"
)

// DefaultShell is the command that runs a step's script when the step
// sets no `shell:`.
var DefaultShell = []string{"/bin/sh", "-e"}

// ShellCommand is the step's `shell:` split on white space, or a copy of
// DefaultShell when it has none. The script itself is never one of these
// words: executors hand it over as a file (see internal/executor).
func (s *Step) ShellCommand() []string {
	if f := strings.Fields(s.Shell); len(f) > 0 {
		return f
	}
	return append([]string(nil), DefaultShell...)
}

func (d *decoder) steps(e entry, allowedSecrets map[string]bool, idTokens map[string]idTokenDef) []Step {
	if isNull(e.val) {
		d.errorf(e.kpos, "steps is empty; a workflow needs at least one step")
		return nil
	}
	nodes, ps, ok := d.list(e.val, e.vpos(), "steps", "[{run: make test}]")
	if !ok {
		return nil
	}
	if len(nodes) == 0 {
		d.errorf(e.vpos(), "steps is empty; a workflow needs at least one step")
		return nil
	}
	out := make([]Step, 0, len(nodes))
	for i, n := range nodes {
		out = append(out, d.step(i+1, n, ps[i], allowedSecrets, idTokens))
	}
	if last := len(out) - 1; out[last].Detach {
		d.errorf(ps[last], "step %d is detached but no step comes after it; a detached step is a service for the steps after it (remove detach: true, or add the steps that use it)", last+1)
	}
	return out
}

func (d *decoder) step(num int, n ast.Node, at pos, allowedSecrets map[string]bool, idTokens map[string]idTokenDef) Step {
	where := fmt.Sprintf("step %d", num)
	s := Step{Name: where}
	es, ok := d.entries(n, at, where)
	if !ok {
		return s
	}
	var run, uses, with, shell *entry
	var envPos map[string]pos
	named := false
	for _, e := range es {
		switch e.key {
		case "name":
			if v, ok := d.text(e, where+" name"); ok && d.displayName(e.vpos(), where+" name", v) {
				s.Name, named = v, true
			}
		case "run":
			run = &e
			if v, ok := d.str(e.val, e.vpos(), where+" run"); ok {
				if strings.TrimSpace(v) == "" {
					d.errorf(e.vpos(), "%s run is empty; write the script to run", where)
				}
				s.Run = v
			}
		case "uses":
			uses = &e
			if v, ok := d.text(e, where+" uses"); ok {
				if err := checkUses(v); err != nil {
					d.errorf(e.vpos(), "%s uses: %v", where, err)
				}
				s.Uses = v
			}
		case "with":
			with = &e
			s.With = d.with(e, where+" with")
		case "shell":
			shell = &e
			if v, ok := d.text(e, where+" shell"); ok {
				s.Shell = strings.Join(strings.Fields(v), " ")
			}
		case "env":
			s.Env, envPos = d.env(e, where+" env")
		case "secrets":
			for _, it := range d.secretNames(e, where+" secrets") {
				if !allowedSecrets[it.s] {
					d.errorf(it.p, "secret %s is not listed in the workflow's secrets; add it there too (secrets: [%s])", it.s, it.s)
					continue
				}
				s.Secrets = append(s.Secrets, it.s)
			}
		case "timeout":
			if t, ok := d.duration(e, where+" timeout"); ok {
				s.Timeout = t
			}
		case "continue-on-error":
			if b, ok := d.boolean(e, where+" continue-on-error"); ok {
				s.ContinueOnError = b
			}
		case "detach":
			if b, ok := d.boolean(e, where+" detach"); ok {
				s.Detach = b
			}
		case "id-tokens":
			s.IDTokens = d.stepIDTokens(e, where, idTokens)
		default:
			d.unknownKey(e, where, stepKeys)
		}
	}
	// After the loop: env may come after secrets.
	if envPos != nil {
		for _, name := range s.Secrets {
			if p, clash := envPos[name]; clash {
				d.errorf(p, "%s is both a secret and an env variable of %s; rename one", name, where)
			}
		}
		for _, name := range s.IDTokens {
			if p, clash := envPos[name]; clash {
				d.errorf(p, "%s is both an id token and an env variable of %s; rename one", name, where)
			}
		}
	}
	switch {
	case run != nil && uses != nil:
		later := uses
		if uses.kpos.line < run.kpos.line || (uses.kpos.line == run.kpos.line && uses.kpos.col < run.kpos.col) {
			later = run
		}
		d.errorf(later.kpos, "%s has both run and uses; a step is either a script (run) or a shared step (uses)", where)
	case run == nil && uses == nil:
		d.errorf(at, "%s needs run (a script) or uses (a shared step)", where)
	}
	if with != nil && uses == nil {
		d.errorf(with.kpos, "%s with is only for shared steps (uses)", where)
	}
	if shell != nil && uses != nil {
		d.errorf(shell.kpos, "%s shell is only for scripts (run); a shared step sets its own", where)
	}
	if !named && s.Uses != "" {
		s.Name = s.Uses
	}
	return s
}

// with reads the inputs of a shared step: names to string values.
func (d *decoder) with(e entry, what string) map[string]string {
	if isNull(e.val) {
		return nil
	}
	es, ok := d.entries(e.val, e.vpos(), what)
	if !ok {
		return nil
	}
	m := make(map[string]string, len(es))
	for _, x := range es {
		if !validInputName(x.key) {
			d.errorf(x.kpos, "%q in %s is not a valid input name; use letters, digits, _ and -", x.key, what)
			continue
		}
		if v, ok := d.str(x.val, x.vpos(), what+" "+x.key); ok {
			m[x.key] = v
		}
	}
	return m
}

func validInputName(s string) bool {
	if s == "" || s[0] == '-' || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// checkUses accepts a directory of the repository written as ./PATH.
func checkUses(u string) error {
	if !strings.HasPrefix(u, "./") {
		return fmt.Errorf("%q must be a directory of the repository starting with ./, like ./.knotless/steps/lint", u)
	}
	if c := path.Clean(u); c == "." {
		return fmt.Errorf("%q is the repository itself; name the directory holding step.yml", u)
	} else if c == ".." || strings.HasPrefix(c, "../") {
		return fmt.Errorf("%q leaves the repository", u)
	}
	return nil
}

var errNoHashFiles = errors.New("no hashFiles function given")

// keyTemplate parses a cache key. Keys are text with optional
// {{ hashFiles "PATTERN" ... }} actions and nothing else.
func keyTemplate(key string, hashFiles func(patterns ...string) (string, error)) (*template.Template, error) {
	t, err := template.New("key").Funcs(template.FuncMap{"hashFiles": hashFiles}).Parse(key)
	if err != nil {
		return nil, fmt.Errorf("invalid template: %s", strings.TrimPrefix(err.Error(), "template: key:"))
	}
	if t.Tree == nil || t.Tree.Root == nil {
		return t, nil
	}
	for _, n := range t.Tree.Root.Nodes {
		switch n := n.(type) {
		case *tparse.TextNode:
		case *tparse.ActionNode:
			if !isHashFilesCall(n) {
				return nil, fmt.Errorf("%s is not allowed; a key may only use {{ hashFiles \"PATTERN\" ... }}", n.String())
			}
		default:
			return nil, fmt.Errorf("%s is not allowed; a key may only use {{ hashFiles \"PATTERN\" ... }}", n.String())
		}
	}
	return t, nil
}

func isHashFilesCall(a *tparse.ActionNode) bool {
	if a.Pipe == nil || len(a.Pipe.Decl) > 0 || len(a.Pipe.Cmds) != 1 {
		return false
	}
	args := a.Pipe.Cmds[0].Args
	if len(args) < 2 {
		return false
	}
	if id, ok := args[0].(*tparse.IdentifierNode); !ok || id.Ident != "hashFiles" {
		return false
	}
	for _, arg := range args[1:] {
		if _, ok := arg.(*tparse.StringNode); !ok {
			return false
		}
	}
	return true
}

// checkCacheKey parses key and checks each hashFiles pattern: a valid
// glob, relative to the checkout and staying in it.
func checkCacheKey(key string) error {
	t, err := keyTemplate(key, func(patterns ...string) (string, error) {
		for _, p := range patterns {
			if err := checkHashPattern(p); err != nil {
				return "", err
			}
		}
		return "", nil
	})
	if err != nil {
		return err
	}
	if err := t.Execute(io.Discard, nil); err != nil {
		var ee template.ExecError
		if errors.As(err, &ee) && errors.Unwrap(ee.Err) != nil {
			return errors.Unwrap(ee.Err)
		}
		return err
	}
	return nil
}

func checkHashPattern(p string) error {
	c := path.Clean(p)
	switch {
	case p == "":
		return errors.New("hashFiles pattern is empty")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("hashFiles pattern %q is absolute; patterns are relative to the checkout", p)
	case c == ".." || strings.HasPrefix(c, "../"):
		return fmt.Errorf("hashFiles pattern %q leaves the checkout", p)
	}
	if _, err := compileGlob(p); err != nil {
		return fmt.Errorf("hashFiles: %v", err)
	}
	return nil
}

// RenderCacheKey expands a cache key template (Cache.Key), calling
// hashFiles for each {{ hashFiles "PATTERN" ... }} action with the
// patterns as written; the caller decides how files are hashed (relative
// to the checkout). Errors come from an invalid key or from hashFiles.
func RenderCacheKey(key string, hashFiles func(patterns ...string) (string, error)) (string, error) {
	if hashFiles == nil {
		return "", fmt.Errorf("render cache key %q: %w", key, errNoHashFiles)
	}
	t, err := keyTemplate(key, hashFiles)
	if err != nil {
		return "", fmt.Errorf("render cache key %q: %w", key, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, nil); err != nil {
		return "", fmt.Errorf("render cache key %q: %w", key, err)
	}
	return b.String(), nil
}
