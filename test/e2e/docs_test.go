package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// The docs' command blocks are run by tests. Each ```sh block of a page
// carries a marker, an HTML comment on the line before its fence:
//
//	<!-- test -->              run, in order, in the page's test (one shell)
//	<!-- test: background -->  run in the background of that shell: one
//	                           command (knotless-server, knotless-run run)
//	                           waited for until it says it is ready, and
//	                           stopped when the next one of its program
//	                           starts or the script ends
//	<!-- test: values -->      the reader's values (export NAME=...): the
//	                           test sets the same names to its own values
//	<!-- tested by TestName: why -->  a named test runs the same command
//	<!-- illustrative: why --> not run; the reason says what covers it
//
// TestDocs_EveryShellBlockIsRunOrMarked keeps every block marked and the
// named tests real; the pages' own tests run them.

// docBlock is one fenced block of a Markdown page.
type docBlock struct {
	doc    string // module-relative path of the page
	line   int    // of the opening fence, 1-based
	lang   string // the fence's info string ("sh", "yaml fragment", ...)
	marker string // the comment before the fence, without <!-- -->; "" if none
	text   string
}

var markerLine = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)

// docBlocks returns the fenced blocks of the page at rel (module-relative).
func docBlocks(t testing.TB, rel string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	var cur *docBlock
	marker := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &docBlock{doc: rel, line: n, lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), marker: marker}
			marker = ""
		default:
			marker = ""
			if m := markerLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				marker = m[1]
			}
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: a fenced block that never ends", rel, cur.line)
	}
	return blocks
}

// docPages are the module's Markdown pages, module-relative.
func docPages(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", moduleRoot, "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var pages []string
	for _, p := range strings.Fields(string(out)) {
		if _, err := os.Stat(filepath.Join(moduleRoot, p)); err == nil {
			pages = append(pages, p)
		}
	}
	return pages
}

// pageTests names the test that runs each page's blocks marked test.
var pageTests = map[string]string{
	"docs/server.md":           "TestDocs_ServerRunnerAndRunsGuidesRunAsWritten",
	"docs/runner.md":           "TestDocs_ServerRunnerAndRunsGuidesRunAsWritten",
	"docs/runs.md":             "TestDocs_ServerRunnerAndRunsGuidesRunAsWritten",
	"docs/docker.md":           "TestDocs_DockerGuideRunsAsWritten",
	"docs/kubernetes.md":       "TestDocs_KubernetesGuideRunsAsWritten",
	"docs/scaling.md":          "TestDocs_ScalingGuideRunsAsWritten",
	"docs/oidc.md":             "TestDocs_OIDCGuideRunsAsWritten",
	"docs/container-builds.md": "TestDocs_ContainerBuildsGuideRunsAsWritten",
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w+)\(`)

// Every ```sh block of every page is run by a test, or says which test
// runs the same command, or why it is only illustrative; a page with run
// blocks has a test that runs it, and a named test exists.
func TestDocs_EveryShellBlockIsRunOrMarked(t *testing.T) {
	tests := map[string]bool{}
	err := filepath.WalkDir(moduleRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || p == filepath.Join(moduleRoot, "test", "cluster", "kube")) {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
				tests[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, page := range docPages(t) {
		for _, b := range docBlocks(t, page) {
			if b.lang != "sh" {
				continue
			}
			where := fmt.Sprintf("%s:%d", b.doc, b.line)
			kind, rest, _ := strings.Cut(b.marker, ":")
			kind, rest = strings.TrimSpace(kind), strings.TrimSpace(rest)
			switch {
			case b.marker == "test" || b.marker == "test: background" || b.marker == "test: values":
				if pageTests[page] == "" || !tests[pageTests[page]] {
					t.Errorf("%s: marked %q, but no test runs %s's blocks (pageTests)", where, b.marker, page)
				}
				counts["run by its page's test"]++
			case strings.HasPrefix(b.marker, "tested by "):
				name := strings.Fields(strings.TrimPrefix(b.marker, "tested by "))[0]
				name = strings.TrimSuffix(name, ":")
				if !tests[name] {
					t.Errorf("%s: tested by %s, which is no test of this module", where, name)
				}
				counts["run by a named test"]++
			case kind == "illustrative" && rest != "":
				t.Logf("%s: illustrative: %s", where, rest)
				counts["illustrative"]++
			default:
				t.Errorf("%s: a ```sh block without a marker (<!-- test -->, <!-- tested by TestName -->, <!-- illustrative: why -->); got %q", where, b.marker)
			}
		}
	}
	t.Logf("shell blocks: %v", counts)
}

var (
	mdLink   = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	mdHeader = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*$`)
)

// anchor is GitHub's id of a heading: lower case, letters, digits, '-'
// and '_' kept, spaces as '-', everything else (backticks, ':', '.')
// dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors are the heading ids of a page (duplicates get -1, -2, ...).
func anchors(t testing.TB, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, seen := map[string]bool{}, map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if m := mdHeader.FindStringSubmatch(line); m != nil && !fenced {
			a := anchor(m[2])
			if n := seen[a]; n > 0 {
				out[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				out[a] = true
			}
			seen[a]++
		}
	}
	return out
}

// Every relative link and image of every page leads to a file or directory
// of the repository, and every #anchor to a heading of its page.
func TestDocs_RelativeLinksResolve(t *testing.T) {
	checked := 0
	for _, page := range docPages(t) {
		data, err := os.ReadFile(filepath.Join(moduleRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for n, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				path := filepath.Join(moduleRoot, page)
				if file != "" {
					path = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %s: %v", page, n+1, target, err)
					continue
				}
				if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[frag] {
					t.Errorf("%s:%d: link %s: no heading #%s in %s", page, n+1, target, frag, filepath.Base(path))
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the test proves nothing")
	}
	t.Logf("%d relative links resolve", checked)
}

// importGraph is the module's packages (those under test/ aside) and the
// module packages each imports, as docs/architecture.md writes them.
func importGraph(t testing.TB) string {
	t.Helper()
	cmd := exec.Command(goTool, "list", "-f", `{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = moduleRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "knotless.dev/knotless/"
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(l, ":")
		pkg = strings.TrimPrefix(pkg, mod)
		if strings.HasPrefix(pkg, "test/") {
			continue
		}
		line := pkg + ":"
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, mod) {
				line += " " + strings.TrimPrefix(imp, mod)
			}
		}
		lines = append(lines, line)
	}
	sort.Slice(lines, func(i, j int) bool {
		a, _, _ := strings.Cut(lines[i], ":")
		b, _, _ := strings.Cut(lines[j], ":")
		return a < b
	})
	return strings.Join(lines, "\n") + "\n"
}

// docs/architecture.md's import graph is the code's: a package added,
// removed or importing another shows here until the page says so.
func TestDocs_ArchitectureImportGraphIsTheCode(t *testing.T) {
	var doc string
	for _, b := range docBlocks(t, "docs/architecture.md") {
		if b.marker == "import graph" {
			doc = b.text
		}
	}
	if doc == "" {
		t.Fatal("docs/architecture.md has no block marked <!-- import graph -->")
	}
	if code := importGraph(t); code != doc {
		t.Errorf("docs/architecture.md's import graph is not the code's; the code's is:\n%s", code)
	}
}

// hopCell is "FILE: FUNC" in a row of architecture.md's table of a step's
// bytes; FUNC is NAME or TYPE.METHOD.
var hopCell = regexp.MustCompile("`([a-z0-9_./-]+\\.go): ([A-Za-z0-9_]+(?:\\.[A-Za-z0-9_]+)?)`")

// TestDocs_ArchitectureHopsAreTheCode: every hop of architecture.md's
// table of a step's bytes names a file and a function (or method) that
// exist, so that the map stays true as the code moves.
func TestDocs_ArchitectureHopsAreTheCode(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(data), "<!-- hops -->")
	if i < 0 {
		t.Fatal("docs/architecture.md has no table marked <!-- hops -->")
	}
	hops := hopCell.FindAllStringSubmatch(string(data[i:]), -1)
	if len(hops) < 15 {
		t.Fatalf("%d hops in the table, want every one of a step's bytes", len(hops))
	}
	for _, h := range hops {
		file, name := h[1], h[2]
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(moduleRoot, file), nil, 0)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		recv, fn, isMethod := strings.Cut(name, ".")
		if !isMethod {
			fn, recv = recv, ""
		}
		found := false
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != fn {
				continue
			}
			if recv == "" && fd.Recv == nil {
				found = true
			}
			if recv != "" && fd.Recv != nil && len(fd.Recv.List) == 1 {
				typ := fd.Recv.List[0].Type
				if st, ok := typ.(*ast.StarExpr); ok {
					typ = st.X
				}
				if id, ok := typ.(*ast.Ident); ok && id.Name == recv {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("docs/architecture.md names %s: %s, which %s does not declare", file, name, file)
		}
	}
}
