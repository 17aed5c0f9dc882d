package docscheck

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode"
)

var (
	rootOnce sync.Once
	root     string
	rootErr  error
)

// moduleRoot is the directory of the module's go.mod, above the test's
// working directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		for err == nil {
			if _, serr := os.Stat(filepath.Join(dir, "go.mod")); serr == nil {
				root = dir
				return
			}
			if filepath.Dir(dir) == dir {
				err = fmt.Errorf("no go.mod above the working directory")
				break
			}
			dir = filepath.Dir(dir)
		}
		rootErr = err
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return root
}

func blocks(t testing.TB, rel string) []Block {
	t.Helper()
	b, err := Blocks(moduleRoot(t), rel)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pages(t testing.TB) []string {
	t.Helper()
	p, err := Pages(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// goTool is the go command: on PATH, or Go's usual place.
func goTool(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	const usual = "/usr/local/go/bin/go"
	if _, err := os.Stat(usual); err != nil {
		t.Fatal("no go command on PATH or at " + usual)
	}
	return usual
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
	"docs/storage.md":          "TestDocs_StorageGuideRunsAsWritten",
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w+)\(`)

// Every ```sh block of every page is run by a test, or says which test
// runs the same command, or why it is only illustrative; a page with run
// blocks has a test that runs it, and a named test exists.
func TestDocs_EveryShellBlockIsRunOrMarked(t *testing.T) {
	root := moduleRoot(t)
	tests := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || p == filepath.Join(root, "test", "cluster", "kube")) {
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
	for _, page := range pages(t) {
		for _, b := range blocks(t, page) {
			if b.Lang != "sh" {
				continue
			}
			where := fmt.Sprintf("%s:%d", b.Doc, b.Line)
			kind, rest, _ := strings.Cut(b.Marker, ":")
			kind, rest = strings.TrimSpace(kind), strings.TrimSpace(rest)
			switch {
			case b.Marker == "test" || b.Marker == "test: background" || b.Marker == "test: values":
				if pageTests[page] == "" || !tests[pageTests[page]] {
					t.Errorf("%s: marked %q, but no test runs %s's blocks (pageTests)", where, b.Marker, page)
				}
				counts["run by its page's test"]++
			case strings.HasPrefix(b.Marker, "tested by "):
				name := strings.Fields(strings.TrimPrefix(b.Marker, "tested by "))[0]
				name = strings.TrimSuffix(name, ":")
				if !tests[name] {
					t.Errorf("%s: tested by %s, which is no test of this module", where, name)
				}
				counts["run by a named test"]++
			case kind == "illustrative" && rest != "":
				t.Logf("%s: illustrative: %s", where, rest)
				counts["illustrative"]++
			default:
				t.Errorf("%s: a ```sh block without a marker (<!-- test -->, <!-- tested by TestName -->, <!-- illustrative: why -->); got %q", where, b.Marker)
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
	for _, line := range proseLines(string(data)) {
		if m := mdHeader.FindStringSubmatch(line); m != nil {
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
	root := moduleRoot(t)
	checked := 0
	for _, page := range pages(t) {
		data, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range proseLines(string(data)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				path := filepath.Join(root, page)
				if file != "" {
					path = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %s: %v", page, n, target, err)
					continue
				}
				if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[frag] {
					t.Errorf("%s:%d: link %s: no heading #%s in %s", page, n, target, frag, filepath.Base(path))
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
// module packages each imports, as docs/architecture.md writes them. It
// runs go list, which builds nothing.
func importGraph(t testing.TB) string {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-f", `{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = moduleRoot(t)
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
	for _, b := range blocks(t, "docs/architecture.md") {
		if b.Marker == "import graph" {
			doc = b.Text
		}
	}
	if doc == "" {
		t.Fatal("docs/architecture.md has no block marked <!-- import graph -->")
	}
	if code := importGraph(t); code != doc {
		t.Errorf("docs/architecture.md's import graph is not the code's; the code's is:\n%s", code)
	}
}
