package workflow

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/units"
)

// The keys each mapping accepts, in the order messages list them.
var (
	workflowKeys = []string{"name", "on", "matrix", "needs", "runners", "image", "arch", "container-builds", "services", "env", "secrets", "timeout", "resources", "checkout", "caches", "outputs", "retry", "concurrency", "id-tokens", "steps"}
	onKeys       = []string{"push", "pull", "manual", "schedule"}
	pushKeys     = []string{"branches", "tags"}
	pullKeys     = []string{"branches"}
	resourceKeys = []string{"cpus", "memory", "disk"}
	cacheKeys    = []string{"key", "restore-keys", "paths"}
	stepKeys     = []string{"name", "run", "uses", "with", "shell", "env", "secrets", "timeout", "continue-on-error", "detach", "id-tokens"}
)

func (d *decoder) unknownKey(e entry, where string, allowed []string) {
	list := strings.Join(allowed, ", ")
	if s := suggest(e.key, allowed); s != "" {
		d.errorf(e.kpos, "unknown key %q in %s; did you mean %q? (expected one of: %s)", e.key, where, s, list)
		return
	}
	d.errorf(e.kpos, "unknown key %q in %s; expected one of: %s", e.key, where, list)
}

func (d *decoder) workflow(n ast.Node, at pos) *Workflow {
	w := &Workflow{
		Path:     d.path,
		Name:     defaultName(d.path),
		On:       Triggers{Push: &PushTrigger{}, Manual: true},
		Timeout:  DefaultTimeout,
		Checkout: DefaultCheckout,
	}
	if isNil(n) {
		d.errorf(at, "the workflow must be a mapping with at least steps:")
		return nil
	}
	es, ok := d.entries(n, at, "the workflow file")
	if !ok {
		return nil
	}
	l := d.topLevel(w, es)
	return d.finishWorkflow(w, at, l)
}

// laterEntries is what the workflow's top level holds that is read once
// every key is known: the entries of steps and services (they need the
// secrets), the secrets, the env's positions, the id tokens, and whether
// the name holds the matrix's values itself.
type laterEntries struct {
	steps, services *entry
	secrets         []item
	envPos          map[string]pos
	templated       bool
	idDefs          map[string]idTokenDef
}

// topLevel reads each top-level key of the workflow (es) into w, one case
// per key of WORKFLOW.md's top level, and returns what is read later.
func (d *decoder) topLevel(w *Workflow, es []entry) laterEntries {
	var l laterEntries
	for _, e := range es {
		switch e.key {
		case "name":
			d.substituted = false
			if s, ok := d.text(e, "name"); ok && d.displayName(e.vpos(), "name", s) {
				w.Name, l.templated = s, d.substituted
			}
		case "on":
			d.fixed = "on"
			w.On = d.triggers(e)
			d.fixed = ""
		case "matrix":
			// Read before the rest (parse): d.matrix, d.combo.
		case "needs":
			w.Needs = d.needs(e)
		case "retry":
			d.fixed = "retry"
			w.Retry = d.retry(e)
			d.fixed = ""
		case "runners":
			for _, it := range d.names(e, "runners", `[k8s-ci]`) {
				w.Runners = append(w.Runners, it.s)
			}
		case "image":
			if s, ok := d.imageText(e, "image"); ok {
				w.Image = s
			}
		case "arch":
			if s, ok := d.word(e, "arch"); ok {
				if !slices.Contains(Arches, s) {
					d.errorf(e.vpos(), "arch %q: want one of %s (the names Go and Kubernetes use: kubernetes.io/arch)", s, strings.Join(Arches, ", "))
				} else {
					w.Arch = s
				}
			}
		case "container-builds":
			if b, ok := d.boolean(e, "container-builds"); ok {
				w.ContainerBuilds = b
			}
		case "env":
			w.Env, l.envPos = d.env(e, "env")
		case "secrets":
			l.secrets = d.secretNames(e, "secrets")
			for _, it := range l.secrets {
				w.Secrets = append(w.Secrets, it.s)
			}
		case "timeout":
			if t, ok := d.duration(e, "timeout"); ok {
				w.Timeout = t
			}
		case "resources":
			w.Resources = d.resources(e)
		case "checkout":
			w.Checkout = d.checkout(e)
		case "caches":
			w.Caches = d.caches(e)
		case "outputs":
			w.Outputs = d.outputs(e)
		case "concurrency":
			w.Concurrency = d.concurrency(e)
		case "id-tokens":
			l.idDefs = d.idTokens(e)
		case "services":
			l.services = &e
		case "steps":
			l.steps = &e
		default:
			d.unknownKey(e, "the workflow", workflowKeys)
		}
	}
	return l
}

// finishWorkflow completes w once its top level is read (l): the name of
// a matrix's run, the services and steps with the secrets they may ask
// for, the checks across keys (a name both secret and env, needs' refs,
// id tokens). A workflow without steps is an error at at.
func (d *decoder) finishWorkflow(w *Workflow, at pos, l laterEntries) *Workflow {
	w.Base = w.Name
	if d.matrix != nil {
		w.Matrix, w.Combo = d.matrix, d.combo
		if l.templated {
			w.Base = defaultName(d.path)
		} else {
			w.Name += " (" + d.combo.Label() + ")"
		}
	}
	allowed := map[string]bool{}
	for _, it := range l.secrets {
		allowed[it.s] = true
		if p, clash := l.envPos[it.s]; clash {
			d.errorf(p, "%s is both a secret and an env variable of the workflow; rename one", it.s)
		}
	}
	if l.services != nil {
		w.Services = d.services(*l.services, allowed)
	}
	d.checkNeedsRefs(w.Needs)
	d.checkIDTokens(l.idDefs, w.Timeout, allowed, l.envPos)
	for name, def := range l.idDefs {
		if w.IDTokens == nil {
			w.IDTokens = map[string]IDToken{}
		}
		w.IDTokens[name] = def.tok
	}
	if l.steps == nil {
		d.errorf(at, "missing steps: a workflow needs at least one step (steps: [{run: make test}])")
		return w
	}
	w.Steps = d.steps(*l.steps, allowed, l.idDefs)
	return w
}

// text reads a non-empty single-line string.
func (d *decoder) text(e entry, what string) (string, bool) {
	s, ok := d.str(e.val, e.vpos(), what)
	if !ok {
		return "", false
	}
	if strings.TrimSpace(s) == "" {
		d.errorf(e.vpos(), "%s is empty", what)
		return "", false
	}
	if i := strings.IndexAny(s, "\n\r"); i >= 0 {
		d.errorf(e.vpos(), "%s must be one line of text: character %d is %s", what, utf8.RuneCountInString(s[:i])+1, api.RuneName(rune(s[i])))
		return "", false
	}
	if !d.shown(e.vpos(), what, s) {
		return "", false
	}
	return s, true
}

// shown reports whether s, a name people read, may be shown as it is
// (api.CheckText), reporting at p the character that may not.
func (d *decoder) shown(p pos, what, s string) bool {
	if err := api.CheckText(what, s); err != nil {
		d.errorf(p, "%v", err)
		return false
	}
	return true
}

// displayName reports whether s, a workflow's or step's name:, holds
// nothing that reads as an escape (api.CheckDisplayName: shown escaped, a
// hidden character would read the same), reporting at p what does.
func (d *decoder) displayName(p pos, what, s string) bool {
	if err := api.CheckDisplayName(what, s); err != nil {
		d.errorf(p, "%v", err)
		return false
	}
	return true
}

// word reads a non-empty string without white space.
func (d *decoder) word(e entry, what string) (string, bool) {
	s, ok := d.text(e, what)
	if ok && strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		d.errorf(e.vpos(), "%s %q contains white space", what, s)
		return "", false
	}
	return s, ok
}

func (d *decoder) duration(e entry, what string) (time.Duration, bool) {
	if _, isNum := e.val.(*ast.IntegerNode); isNum {
		t, _ := scalarText(e.val)
		d.errorf(e.vpos(), "%s %s has no unit; write a Go duration like %sm or %ss", what, t, t, t)
		return 0, false
	}
	s, ok := d.str(e.val, e.vpos(), what)
	if !ok {
		return 0, false
	}
	t, err := parseDuration(s)
	if err != nil {
		d.errorf(e.vpos(), "%s: %v", what, err)
		return 0, false
	}
	return t, true
}

func (d *decoder) boolean(e entry, what string) (bool, bool) {
	if b, ok := e.val.(*ast.BoolNode); ok {
		return b.Value, true
	}
	d.errorf(e.vpos(), "%s must be true or false; got %s", what, kind(e.val))
	return false, false
}

// names reads a list of runner names or labels.
func (d *decoder) names(e entry, what, example string) []item {
	if isNull(e.val) {
		return nil
	}
	items, _ := d.strList(e.val, e.vpos(), what, example)
	var out []item
	for _, it := range items {
		if strings.IndexFunc(it.s, func(r rune) bool { return unicode.IsSpace(r) || r == ',' }) >= 0 {
			d.errorf(it.p, "%q in %s contains white space or a comma; list each name separately", it.s, what)
			continue
		}
		out = append(out, it)
	}
	return d.unique(out, what)
}

// unique reports entries listed twice and drops the repeats.
func (d *decoder) unique(items []item, what string) []item {
	seen := map[string]pos{}
	var out []item
	for _, it := range items {
		if first, dup := seen[it.s]; dup {
			d.errorf(it.p, "%s lists %q twice (first at %s)", what, it.s, first)
			continue
		}
		seen[it.s] = it.p
		out = append(out, it)
	}
	return out
}

func (d *decoder) secretNames(e entry, what string) []item {
	if isNull(e.val) {
		return nil
	}
	items, _ := d.strList(e.val, e.vpos(), what, "[CODECOV_TOKEN]")
	var out []item
	for _, it := range items {
		switch {
		case !ValidEnvName(it.s):
			d.errorf(it.p, "secret name %q in %s is not a valid variable name; use letters, digits and _, not starting with a digit", it.s, what)
		case reservedEnv(it.s):
			d.errorf(it.p, "secret name %s in %s is reserved: knotless sets it for every step", it.s, what)
		default:
			out = append(out, it)
		}
	}
	return d.unique(out, what)
}

// env reads a mapping of variable names to string values, and where each
// name was written.
func (d *decoder) env(e entry, what string) (map[string]string, map[string]pos) {
	if isNull(e.val) {
		return nil, nil
	}
	es, ok := d.entries(e.val, e.vpos(), what)
	if !ok {
		return nil, nil
	}
	m := make(map[string]string, len(es))
	ps := make(map[string]pos, len(es))
	for _, x := range es {
		switch {
		case !ValidEnvName(x.key):
			d.errorf(x.kpos, "%q in %s is not a valid variable name; use letters, digits and _, not starting with a digit", x.key, what)
			continue
		case reservedEnv(x.key):
			d.errorf(x.kpos, "%s in %s is reserved: knotless sets it for every step", x.key, what)
			continue
		}
		v, ok := d.str(x.val, x.vpos(), fmt.Sprintf("%s variable %s", what, x.key))
		if !ok {
			continue
		}
		m[x.key] = v
		ps[x.key] = x.kpos
	}
	return m, ps
}

func (d *decoder) triggers(e entry) Triggers {
	var t Triggers
	if isNull(e.val) {
		d.errorf(e.kpos, "on has no value; list the events (push, pull, manual, schedule), or remove on: to run on pushes to any branch and on manual triggers")
		return Triggers{Push: &PushTrigger{}, Manual: true}
	}
	es, ok := d.entries(e.val, e.vpos(), "on")
	if !ok {
		return Triggers{Push: &PushTrigger{}, Manual: true}
	}
	scheduled := false // written, even if wrong: said there
	for _, x := range es {
		switch x.key {
		case "push":
			t.Push = &PushTrigger{}
			for _, y := range d.section(x, "on.push", pushKeys) {
				switch y.key {
				case "branches":
					t.Push.Branches = d.patterns(y, "on.push.branches", "refs/heads/")
				case "tags":
					t.Push.Tags = d.patterns(y, "on.push.tags", "refs/tags/")
				}
			}
		case "pull":
			t.Pull = &PullTrigger{}
			for _, y := range d.section(x, "on.pull", pullKeys) {
				t.Pull.Branches = d.patterns(y, "on.pull.branches", "refs/heads/")
			}
		case "manual":
			t.Manual = d.manual(x)
		case "schedule":
			scheduled = true
			t.Schedule = d.schedules(x)
		default:
			d.unknownKey(x, "on", onKeys)
		}
	}
	if t.Push == nil && t.Pull == nil && !t.Manual && !scheduled {
		d.errorf(e.kpos, "on selects no event; add push, pull, manual or schedule (or remove on: for the default)")
	}
	return t
}

// section reads an optional mapping (null = empty) whose keys must be in
// allowed; the unknown ones are reported and left out.
func (d *decoder) section(e entry, where string, allowed []string) []entry {
	if isNull(e.val) {
		return nil
	}
	es, _ := d.entries(e.val, e.vpos(), where)
	var out []entry
	for _, x := range es {
		if !contains(allowed, x.key) {
			d.unknownKey(x, where, allowed)
			continue
		}
		out = append(out, x)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// patterns reads a list of glob patterns: nil when the value is empty,
// a non-nil (maybe empty) slice otherwise.
func (d *decoder) patterns(e entry, what, refPrefix string) []string {
	if isNull(e.val) {
		return nil
	}
	items, ok := d.strList(e.val, e.vpos(), what, `[main, "release/*"]`)
	if !ok {
		return nil
	}
	out := []string{}
	for _, it := range items {
		if strings.HasPrefix(it.s, "refs/") {
			d.errorf(it.p, "%s names refs without their prefix: write %q, not %q", what, strings.TrimPrefix(it.s, refPrefix), it.s)
			continue
		}
		if _, err := compileGlob(it.s); err != nil {
			d.errorf(it.p, "invalid glob in %s: %v", what, err)
			continue
		}
		out = append(out, it.s)
	}
	return out
}

func (d *decoder) manual(e entry) bool {
	switch v := e.val.(type) {
	case *ast.NullNode:
		return true
	case *ast.BoolNode:
		return v.Value
	case *ast.MappingNode:
		if len(v.Values) == 0 {
			return true
		}
	}
	d.errorf(e.vpos(), "on.manual takes no settings; write manual: {} (or true/false)")
	return true
}

func (d *decoder) resources(e entry) Resources {
	var r Resources
	for _, x := range d.section(e, "resources", resourceKeys) {
		s, ok := d.quantity(x, "resources."+x.key)
		if !ok {
			continue
		}
		switch x.key {
		case "cpus":
			if _, err := units.ParseCPUs(s); err != nil {
				d.errorf(x.vpos(), "resources.cpus: %v", err)
				continue
			}
			r.CPUs = s
		case "memory", "disk":
			n, err := units.ParseSize(s)
			if err != nil {
				d.errorf(x.vpos(), "resources.%s: %v", x.key, err)
				continue
			}
			if x.key == "memory" {
				r.MemoryBytes = n
			} else {
				r.DiskBytes = n
			}
		}
	}
	return r
}

// quantity reads a quantity written as a string or a plain number.
func (d *decoder) quantity(e entry, what string) (string, bool) {
	switch e.val.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
		return scalarText(e.val)
	}
	return d.str(e.val, e.vpos(), what)
}

func (d *decoder) caches(e entry) []Cache {
	if isNull(e.val) {
		return nil
	}
	nodes, ps, ok := d.list(e.val, e.vpos(), "caches", "[{key: deps, paths: [node_modules]}]")
	if !ok {
		return nil
	}
	var out []Cache
	for i, n := range nodes {
		where := fmt.Sprintf("cache %d", i+1)
		var c Cache
		haveKey, havePaths := false, false
		es, ok := d.entries(n, ps[i], where)
		if !ok {
			continue
		}
		for _, x := range es {
			switch x.key {
			case "key":
				haveKey = true
				if s, ok := d.text(x, where+" key"); ok {
					if err := checkCacheKey(s); err != nil {
						d.errorf(x.vpos(), "%s key: %v", where, err)
					}
					c.Key = s
				}
			case "restore-keys":
				if isNull(x.val) {
					continue
				}
				items, _ := d.strList(x.val, x.vpos(), where+" restore-keys", "[gomod-]")
				for _, it := range items {
					c.RestoreKeys = append(c.RestoreKeys, it.s)
				}
			case "paths":
				havePaths = true
				if isNull(x.val) {
					d.errorf(x.kpos, "%s paths is empty; list the directories to save", where)
					continue
				}
				items, ok := d.strList(x.val, x.vpos(), where+" paths", "[~/go/pkg/mod]")
				if ok && len(items) == 0 {
					d.errorf(x.vpos(), "%s paths is empty; list the directories to save", where)
				}
				for _, it := range items {
					if err := CheckCachePath(it.s); err != nil {
						d.errorf(it.p, "%s paths: %v", where, err)
						continue
					}
					c.Paths = append(c.Paths, it.s)
				}
			default:
				d.unknownKey(x, where, cacheKeys)
			}
		}
		if !haveKey {
			d.errorf(ps[i], "%s has no key:", where)
		}
		if !havePaths {
			d.errorf(ps[i], "%s has no paths:", where)
		}
		out = append(out, c)
	}
	return out
}

func (d *decoder) outputs(e entry) []string {
	if isNull(e.val) {
		return nil
	}
	items, _ := d.strList(e.val, e.vpos(), "outputs", "[dist/, coverage.out]")
	var out []string
	for _, it := range items {
		if err := checkRelative(it.s); err != nil {
			d.errorf(it.p, "outputs: %v", err)
			continue
		}
		out = append(out, it.s)
	}
	return out
}

// checkRelative accepts a path that stays inside the checkout.
func checkRelative(p string) error {
	switch c := path.Clean(p); {
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is absolute; outputs are paths relative to the checkout", p)
	case strings.HasPrefix(p, "~"):
		return fmt.Errorf("%q starts with ~; outputs are paths relative to the checkout", p)
	case c == ".." || strings.HasPrefix(c, "../"):
		return fmt.Errorf("%q leaves the checkout", p)
	}
	return nil
}

// CheckCachePath accepts a path of a `caches:` entry: relative to the
// checkout ("node_modules", ".cache/x"), or below the steps' HOME ("~",
// "~/.cache/go-build"), staying inside that root ("a/../b" is fine, "../x"
// and "~/../x" are not). Absolute paths and "~user" are refused: a cache
// never reaches outside the run's own directories.
func CheckCachePath(p string) error {
	rel := p
	root := "the checkout"
	switch {
	case p == "":
		return fmt.Errorf("a path is empty")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is absolute; cache paths are relative to the checkout, or start with ~/ for HOME", p)
	case p == "~":
		return nil
	case strings.HasPrefix(p, "~/"):
		rel, root = strings.TrimPrefix(p, "~/"), "HOME"
	case strings.HasPrefix(p, "~"):
		return fmt.Errorf("%q names another user's home; write ~/ for the steps' HOME", p)
	}
	if c := path.Clean(rel); c == ".." || strings.HasPrefix(c, "../") {
		return fmt.Errorf("%q leaves %s", p, root)
	}
	return nil
}
