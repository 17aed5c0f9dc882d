package workflow

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode"
)

// NeedsDir is the directory of a run's checkout, relative to its root,
// that receives what the runs it needs left: for `needs: [build]`, the
// outputs of build's run under .knotless/needs/build/ and the values it
// exported in .knotless/needs/build.env; for a need that is a matrix, one
// directory and file per run of the matrix, named by its values
// (.knotless/needs/test/linux-1.26/, .knotless/needs/test/linux-1.26.env:
// Combo.DirName).
const NeedsDir = ".knotless/needs"

// Need is one entry of `needs:`: the name of another workflow of the same
// commit (its `name:`, or its file name without extension), where it is
// written.
type Need struct {
	Name      string
	Line, Col int
}

// needs reads `needs:`, a list of workflow names.
func (d *decoder) needs(e entry) []Need {
	if isNull(e.val) {
		return nil
	}
	saved := d.fixed
	d.fixed = "needs"
	defer func() { d.fixed = saved }()
	items, _ := d.strList(e.val, e.vpos(), "needs", "[build]")
	var out []Need
	for _, it := range d.unique(items, "needs") {
		if strings.ContainsRune(it.s, '/') || it.s == "." || it.s == ".." || strings.IndexFunc(it.s, unicode.IsControl) >= 0 {
			d.errorf(it.p, "needs %q: name a workflow by its name: or its file name without extension (build for .knotless/workflows/build.yml); no / or control characters", it.s)
			continue
		}
		out = append(out, Need{Name: it.s, Line: it.p.line, Col: it.p.col})
	}
	return out
}

// PipelineFile is one workflow file of a commit as CheckNeeds reads it:
// its path (relative to the repository's root) and the runs it makes
// (Expand), nil when it did not parse.
type PipelineFile struct {
	Path string
	Runs []*Workflow
}

// Stem is a workflow file's name without directory and extension
// ("build" for .knotless/workflows/build.yml): a workflow's default name,
// and a name `needs:` may use whatever its `name:` says.
func Stem(p string) string { return defaultName(p) }

// CheckNeeds checks the `needs:` of the workflow files of one commit
// together: each entry must name one other file's workflow (its Base
// name, or its file stem; a file that did not parse is known by its
// stem), and no workflow may need itself, directly or through others.
//
// It returns the problems by path, each at its entry (FILE:LINE:COL), and
// for the files without problems the path each of their entries names,
// by entry name.
func CheckNeeds(files []PipelineFile) (problems map[string]ErrorList, resolved map[string]map[string]string) {
	problems = map[string]ErrorList{}
	resolved = map[string]map[string]string{}
	index := map[string][]string{} // name or stem → paths
	add := func(key, p string) {
		if !slices.Contains(index[key], p) {
			index[key] = append(index[key], p)
		}
	}
	var names []string
	for _, f := range files {
		add(Stem(f.Path), f.Path)
		if len(f.Runs) > 0 {
			add(f.Runs[0].Base, f.Path)
			names = append(names, f.Runs[0].Base)
		} else {
			names = append(names, Stem(f.Path))
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	report := func(f PipelineFile, n Need, format string, args ...any) {
		problems[f.Path] = append(problems[f.Path], &Error{Path: DisplayPath(f.Path), Line: n.Line, Col: n.Col, Msg: fmt.Sprintf(format, args...)})
	}
	edges := map[string][]Need{}  // path → its good entries
	target := map[string]string{} // path + "\x00" + entry → needed path
	for _, f := range files {
		if len(f.Runs) == 0 {
			continue
		}
		for _, n := range f.Runs[0].Needs {
			got := index[n.Name]
			switch {
			case len(got) == 0:
				if base, _, ok := strings.Cut(n.Name, " ("); ok && len(index[base]) > 0 {
					report(f, n, "needs %q: that is one run of the matrix workflow %s; needs names whole workflows (write %s: it waits for every run of the matrix)", n.Name, base, base)
					continue
				}
				report(f, n, "needs %q: no workflow of that name in %s (there are: %s)", n.Name, Dir, strings.Join(names, ", "))
			case len(got) > 1:
				stems := make([]string, len(got))
				for i, p := range got {
					stems[i] = Stem(p)
				}
				report(f, n, "needs %q names %d workflows (%s); name one by its file name without extension", n.Name, len(got), strings.Join(stems, ", "))
			case got[0] == f.Path:
				report(f, n, "needs %q is this workflow itself; a workflow cannot wait for itself", n.Name)
			default:
				edges[f.Path] = append(edges[f.Path], n)
				target[f.Path+"\x00"+n.Name] = got[0]
			}
		}
	}
	// A cycle: an entry whose workflow leads back to the one that needs it.
	for _, f := range files {
		for _, n := range edges[f.Path] {
			if cycle := pathBack(target[f.Path+"\x00"+n.Name], f.Path, edges, target); cycle != nil {
				stems := []string{Stem(f.Path)}
				for _, p := range cycle {
					stems = append(stems, Stem(p))
				}
				report(f, n, "needs %q makes a cycle (%s): a workflow cannot wait for itself", n.Name, strings.Join(stems, " → "))
			}
		}
	}
	for _, f := range files {
		if len(f.Runs) == 0 || len(problems[f.Path]) > 0 {
			continue
		}
		m := map[string]string{}
		for _, n := range edges[f.Path] {
			m[n.Name] = target[f.Path+"\x00"+n.Name]
		}
		resolved[f.Path] = m
	}
	return problems, resolved
}

// pathBack returns the paths from from to to along needs (from first, to
// last), nil when to cannot be reached.
func pathBack(from, to string, edges map[string][]Need, target map[string]string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var out []string
			for ; p != ""; p = prev[p] {
				out = append([]string{p}, out...)
			}
			return out
		}
		for _, n := range edges[p] {
			next := target[p+"\x00"+n.Name]
			if _, seen := prev[next]; !seen {
				prev[next] = p
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// NeedsClosure returns paths with every file they need, transitively
// (resolved as CheckNeeds returns it), in the order of files.
func NeedsClosure(files []PipelineFile, resolved map[string]map[string]string, paths []string) []string {
	want := map[string]bool{}
	var visit func(p string)
	visit = func(p string) {
		if want[p] {
			return
		}
		want[p] = true
		for _, q := range resolved[p] {
			visit(q)
		}
	}
	for _, p := range paths {
		visit(p)
	}
	var out []string
	for _, f := range files {
		if want[f.Path] {
			out = append(out, f.Path)
		}
	}
	return out
}

// needDir is the directory a need's run fills under NeedsDir (see there).
func needDir(need string, c Combo) string {
	if len(c) == 0 {
		return path.Join(NeedsDir, need)
	}
	return path.Join(NeedsDir, need, c.DirName())
}

// NeedPaths are where a run's checkout receives one run it needs (need
// as the dependent's `needs:` names it, c that run's matrix values): the
// directory of its outputs and the file of its exported values, relative
// to the checkout's root.
func NeedPaths(need string, c Combo) (dir, values string) {
	dir = needDir(need, c)
	return dir, dir + ".env"
}
