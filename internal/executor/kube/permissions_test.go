package kube

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"knotless.dev/knotless/internal/executor/agentenv"
)

// grant is one verb on one resource (a subresource after a slash), by
// name when name is set: the unit in which Roles and Permissions are
// compared.
type grant struct{ group, resource, name, verb string }

func (g grant) String() string {
	s := g.verb + " " + g.resource
	if g.group != "" {
		s += "." + g.group
	}
	if g.name != "" {
		s += " " + g.name
	}
	return s
}

// grantsOf flattens permissions into grants.
func grantsOf(ps ...Permission) map[grant]bool {
	out := map[grant]bool{}
	for _, p := range ps {
		for _, v := range p.Verbs {
			out[grant{p.APIGroup, p.Resource, p.ResourceName, v}] = true
		}
	}
	return out
}

// grantsOfRules flattens a Role's rules into grants.
func grantsOfRules(rules []rbacv1.PolicyRule) map[grant]bool {
	out := map[grant]bool{}
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, n := range names {
					for _, v := range r.Verbs {
						out[grant{g, res, n, v}] = true
					}
				}
			}
		}
	}
	return out
}

// diff returns the grants of a not in b, sorted.
func diff(a, b map[grant]bool) []string {
	var out []string
	for g := range a {
		if !b[g] {
			out = append(out, g.String())
		}
	}
	slices.Sort(out)
	return out
}

// shippedOwner is the job pods' owner the shipped Deployment names
// (KNOTLESS_OWNER in deploy/kubernetes/base/deployment.yaml).
func shippedOwner(t *testing.T) *metav1.OwnerReference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "kubernetes", "base", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name != "KNOTLESS_OWNER" {
				continue
			}
			kind, name, err := ParseOwner(e.Value)
			if err != nil || kind != "deployment" {
				t.Fatalf("deployment.yaml: KNOTLESS_OWNER %q: %v, want deployment/NAME", e.Value, err)
			}
			return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name}
		}
	}
	t.Fatal("deployment.yaml: no KNOTLESS_OWNER")
	return nil
}

// grantedUnused are grants the shipped Roles hold that no code uses:
// none (the events watch once granted was removed with this table). The
// test fails when a Role stops granting one of these, so the list cannot
// go stale.
var grantedUnused = map[grant]bool{}

// TestPermissions_ShippedRolesGrantExactlyThem holds every Role and
// ClusterRole under deploy/kubernetes to the table (permissions.go):
// base/role.yaml grants Permissions and get on the Deployment its
// Deployment names as KNOTLESS_OWNER, builds/role.yaml grants Permissions
// in the builds namespace (builds pods have no owner), each every verb
// and nothing beyond (but grantedUnused); any other Role fails until it
// is held here. The bug it pins: role.yaml, doctor's list, kube/doc.go
// and the docs each stated the runner's permissions, and no two agreed
// (issue 35). Promise 7 of docs/architecture.md (least privilege).
func TestPermissions_ShippedRolesGrantExactlyThem(t *testing.T) {
	root := filepath.Join("..", "..", "..", "deploy", "kubernetes")
	owner, ok := OwnerPermission(shippedOwner(t))
	if !ok {
		t.Fatal("no owner permission for the shipped Deployment")
	}
	wantGrants := map[string]map[grant]bool{
		filepath.Join("base", "role.yaml"):   grantsOf(append(slices.Clone(Permissions), owner)...),
		filepath.Join("builds", "role.yaml"): grantsOf(Permissions...),
	}
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split("\n"+string(b), "\n---\n") {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Errorf("%s: %v", rel, err)
				continue
			}
			if tm.Kind != "Role" && tm.Kind != "ClusterRole" {
				continue
			}
			var r rbacv1.Role
			if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
				t.Errorf("%s: %v", rel, err)
				continue
			}
			wg, known := wantGrants[rel]
			if !known || tm.Kind != "Role" || seen[rel] {
				t.Errorf("%s: %s %s: a Role this test does not hold to the table (permissions.go): hold it here, or ship no such rights", rel, tm.Kind, r.Name)
				continue
			}
			seen[rel] = true
			got := grantsOfRules(r.Rules)
			if m := diff(wg, got); len(m) > 0 {
				t.Errorf("%s does not grant %v, which the runner uses (permissions.go)", rel, m)
			}
			allowed := maps.Clone(wg)
			maps.Copy(allowed, grantedUnused)
			if x := diff(got, allowed); len(x) > 0 {
				t.Errorf("%s grants %v, which nothing in permissions.go uses: remove it, or add the code's use to the table", rel, x)
			}
			for u := range grantedUnused {
				if !got[u] {
					t.Errorf("%s no longer grants %s: remove it from grantedUnused too", rel, u)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel := range wantGrants {
		if !seen[rel] {
			t.Errorf("no Role in %s", rel)
		}
	}
}

// TestPermissions_DoctorChecksEachOfThemAndTheOwners: doctor reviews
// exactly the table's grants, one verb at a time, and get on the owner
// --owner names (none for a pod owner, whose get the table holds). The
// bug it pins: doctor's list said "every permission the executor uses"
// and left out events and pods/log (issue 35).
func TestPermissions_DoctorChecksEachOfThemAndTheOwners(t *testing.T) {
	for _, owner := range []*metav1.OwnerReference{nil, {APIVersion: "v1", Kind: "Pod", Name: "p"},
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "knotless-runner"}, {APIVersion: "v1", Kind: "ConfigMap", Name: "cm"}} {
		e, err := New(Config{Config: agentenv.Config{Agent: "/bin/true"}, Rest: &rest.Config{Host: "http://127.0.0.1:1"}, Namespace: "ci", Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		got := map[grant]bool{}
		for _, a := range e.needed() {
			r := a.resource
			if a.sub != "" {
				r += "/" + a.sub
			}
			got[grant{a.group, r, a.name, a.verb}] = true
		}
		want := grantsOf(Permissions...)
		if p, ok := OwnerPermission(owner); ok {
			for g := range grantsOf(p) {
				want[g] = true
			}
		}
		if m, x := diff(want, got), diff(got, want); len(m)+len(x) > 0 || len(e.needed()) != len(want) {
			t.Errorf("owner %v: doctor leaves out %v and checks beyond the table %v", owner, m, x)
		}
	}
	if p, _ := OwnerPermission(&metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "s"}); p.APIGroup != "apps" || p.Resource != "statefulsets" || p.ResourceName != "s" {
		t.Errorf("the owner permission of statefulset/s: %+v", p)
	}
}

// clientGroups maps a typed clientset's group getter (CoreV1 without
// its version) to the API group.
var clientGroups = map[string]string{
	"Core": "", "Apps": "apps", "Networking": "networking.k8s.io", "Node": "node.k8s.io",
	"Authorization": "authorization.k8s.io", "Policy": "policy", "Coordination": "coordination.k8s.io",
	"Rbac": "rbac.authorization.k8s.io", "Batch": "batch", "Events": "events.k8s.io",
}

// clientVerbs maps a typed client's method to the API verb.
var clientVerbs = map[string]string{
	"Get": "get", "List": "list", "Watch": "watch", "Create": "create", "Update": "update", "UpdateStatus": "update",
	"Patch": "patch", "Apply": "patch", "Delete": "delete", "DeleteCollection": "deletecollection",
}

// restVerbs maps a REST request's HTTP method to the API verb.
var restVerbs = map[string]string{"Post": "create", "Get": "get", "Put": "update", "Patch": "patch", "Delete": "delete"}

var groupGetter = regexp.MustCompile(`^([A-Z][A-Za-z]*)V[0-9]+((alpha|beta)[0-9]+)?$`)

// use is one API call the source makes, and where.
type use struct {
	grant
	fn, pos string
}

// selName returns the name of a call's method (x.Name(...)) and x.
func selName(e ast.Expr) (string, ast.Expr) {
	c, ok := e.(*ast.CallExpr)
	if !ok {
		return "", nil
	}
	s, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", nil
	}
	return s.Sel.Name, s.X
}

// stringArg is call c's argument i when it is a string literal.
func stringArg(c *ast.CallExpr, i int) string {
	if len(c.Args) <= i {
		return ""
	}
	l, ok := c.Args[i].(*ast.BasicLit)
	if !ok || l.Kind != token.STRING {
		return ""
	}
	s, _ := strconv.Unquote(l.Value)
	return s
}

// scanUses finds the Kubernetes API calls of this package's source (its
// non-test files): typed clients (client.CoreV1().Pods(ns).Get(...),
// GetLogs as get on pods/log), the pod informer (list and watch), and
// REST requests to a subresource (Post()...Resource("pods")...
// SubResource("exec"): create; a WebSocket executor's "GET" of such a
// request in the same function: get). Calls it cannot map fail t.
func scanUses(t *testing.T) []use {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []use
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			var reqs []use
			webSocketGet, restClients := false, 0
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				at := func(g grant) use { return use{g, fd.Name.Name, fset.Position(c.Pos()).String()} }
				method, x := selName(c)
				if method == "NewWebSocketExecutor" && stringArg(c, 1) == "GET" {
					webSocketGet = true
				}
				// Typed client: <G>V1().<Resource>(...).<Method>(...).
				if res, gx := selName(x); res == "RESTClient" {
					restClients++
					return true
				} else if res != "" {
					if getter, _ := selName(gx); groupGetter.MatchString(getter) {
						prefix := groupGetter.FindStringSubmatch(getter)[1]
						group, gok := clientGroups[prefix]
						verb, vok := clientVerbs[method]
						resource := strings.ToLower(res)
						if method == "GetLogs" {
							verb, vok, resource = "get", true, resource+"/log"
						}
						if !gok || !vok {
							t.Errorf("%s: %s().%s().%s: a client call this scan cannot map: add it to clientGroups or clientVerbs", fset.Position(c.Pos()), getter, res, method)
							return true
						}
						out = append(out, at(grant{group: group, resource: resource, verb: verb}))
						return true
					}
				}
				// The informer factory's f.Core().V1().Pods().
				if v, vx := selName(x); method != "" && v == "V1" {
					if core, _ := selName(vx); core == "Core" && (method == "Pods") {
						for _, verb := range []string{"list", "watch"} {
							out = append(out, at(grant{resource: "pods", verb: verb}))
						}
						return true
					}
				}
				// A REST request: ...Resource("pods")...SubResource("exec").
				if method == "SubResource" {
					g, ok := restGrant(c, x)
					if !ok {
						t.Errorf("%s: a REST request this scan cannot map (%s)", fset.Position(c.Pos()), g)
						return true
					}
					reqs = append(reqs, at(g))
				}
				return true
			})
			if restClients != len(reqs) {
				t.Errorf("%s: %s makes %d REST requests and this scan maps %d (only requests to a subresource: ...SubResource(\"exec\"))", name, fd.Name.Name, restClients, len(reqs))
			}
			out = append(out, reqs...)
			if webSocketGet {
				for _, r := range reqs {
					r.verb = "get"
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// restGrant maps a REST request's SubResource call c, of x
// (client.CoreV1().RESTClient().Post()...Resource("pods")...), to its
// grant: the HTTP method after RESTClient() as the verb; ok false when a
// part is missing.
func restGrant(c *ast.CallExpr, x ast.Expr) (g grant, ok bool) {
	sub, group := stringArg(c, 0), "?"
	for e := x; e != nil; {
		m, next := selName(e)
		if m == "" {
			break
		}
		switch {
		case m == "Resource":
			g.resource = stringArg(e.(*ast.CallExpr), 0)
		case restVerbs[m] != "" && g.verb == "":
			if r, _ := selName(next); r == "RESTClient" {
				g.verb = restVerbs[m]
			}
		case groupGetter.MatchString(m):
			group = clientGroups[groupGetter.FindStringSubmatch(m)[1]]
		}
		e = next
	}
	ok = sub != "" && g.resource != "" && g.verb != "" && group != "?"
	g.group, g.resource = group, g.resource+"/"+sub
	return g, ok
}

// TestPermissions_AreTheCallsTheCodeMakes scans this package's source
// for its Kubernetes API calls (scanUses) and holds the table to them:
// every call is in Permissions, in NotGranted, or (in ResolveOwner) the
// get of an owner kind OwnerPermission covers; every grant of
// Permissions and NotGranted is made by some call. So a new call without
// a table entry fails, and so does an entry nothing uses any more. The
// runner's other packages make no call (only this package imports
// client-go, outside test/), which the test checks too. Promise 7 of
// docs/architecture.md (least privilege).
func TestPermissions_AreTheCallsTheCodeMakes(t *testing.T) {
	uses := scanUses(t)
	table := grantsOf(Permissions...)
	not := grantsOf(NotGranted...)
	owners := map[grant]bool{}
	for _, o := range []*metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment"}, {APIVersion: "apps/v1", Kind: "StatefulSet"},
		{APIVersion: "v1", Kind: "ConfigMap"}, {APIVersion: "v1", Kind: "Pod"}} {
		if p, ok := OwnerPermission(o); ok {
			owners[grant{p.APIGroup, p.Resource, "", "get"}] = true
		} else {
			owners[grant{"", "pods", "", "get"}] = true
		}
	}
	if len(owners) != len(OwnerKinds) {
		t.Errorf("owners %v: want one per OwnerKinds %v", owners, OwnerKinds)
	}
	made := map[grant]bool{}
	for _, u := range uses {
		made[u.grant] = true
		switch {
		case table[u.grant], not[u.grant]:
		case u.fn == "ResolveOwner" && owners[u.grant]:
		default:
			t.Errorf("%s (%s) calls %s, which permissions.go does not list: add it to Permissions (and role.yaml) or NotGranted", u.pos, u.fn, u.grant)
		}
	}
	for g := range table {
		if !made[g] {
			t.Errorf("Permissions lists %s, and no call of the package makes it: remove it (and from role.yaml)", g)
		}
	}
	for g := range not {
		if !made[g] {
			t.Errorf("NotGranted lists %s, and no call of the package makes it: remove it", g)
		}
	}

	// Only this package talks to the API server: no other non-test Go
	// file of the runner imports client-go (test/ and bench/ hold the
	// harnesses and benchmark programs, which drive clusters of their own).
	repo := filepath.Join("..", "..", "..")
	here, _ := filepath.Abs(".")
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != repo && (strings.HasPrefix(n, ".") || (n == "test" || n == "bench") && filepath.Dir(path) == repo || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		if dir, _ := filepath.Abs(filepath.Dir(path)); dir == here {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return nil
		}
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); strings.HasPrefix(p, "k8s.io/client-go") {
				t.Errorf("%s imports %s: its API calls are not in this scan (permissions.go)", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
