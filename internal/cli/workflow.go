package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/workflow"
)

// LintProblem is one problem `workflow lint --json` reports.
type LintProblem struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

// LintIgnored is an entry of .knotless/workflows that is not a workflow
// file, so that the server will never run it, and why
// (workflow.NotWorkflow).
type LintIgnored struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// LintOutput is what `workflow lint --json` prints.
type LintOutput struct {
	Files    []string      `json:"files"`
	Problems []LintProblem `json:"problems"`
	// Runs (with --expand) are the runs each file without problems makes
	// in a pipeline.
	Runs []LintRun `json:"runs,omitempty"`
	// Ignored lists the entries of .knotless/workflows that are not
	// workflow files (without FILES only).
	Ignored []LintIgnored `json:"ignored"`
}

// LintRun is one run a workflow file makes (`workflow lint --expand`).
type LintRun struct {
	File   string            `json:"file"`
	Name   string            `json:"name"`
	Matrix []api.MatrixValue `json:"matrix,omitempty"`
	// Needs are the needs: entries of its workflow; Retry says when it is
	// retried ("never", or "up to 2 times on evicted, ...").
	Needs []string `json:"needs,omitempty"`
	Retry string   `json:"retry"`
}

func (s *session) workflowCmd() *cobra.Command {
	cmd := group("workflow", "Check workflow files", `Work with workflow files (.knotless/workflows/*.yml). These commands need no
server and no login.`)
	o := &workflowLintOptions{}
	lint := &cobra.Command{
		Use:   "lint [FILES...]",
		Short: "Check workflow files and print every problem as FILE:LINE:COL",
		Long: `Parse and validate workflow files exactly as the server does, and print every
problem as FILE:LINE:COL: message. Without FILES it checks
.knotless/workflows/*.yml and *.yaml of the git work tree holding the
current directory (or of the current directory outside one), from any
directory of the checkout.

needs: entries are checked against the other workflows of the directory
(unknown or ambiguous names, a workflow needing itself, cycles), as the
server checks them at a push. With --expand, lint also prints the runs each
file makes: one per combination of its matrix, named by its values, with
what it needs and when it is retried.

A workflow file is a regular file named *.yml or *.yaml (in lower case)
directly in .knotless/workflows, a real directory, as the server reads
them: a symbolic link (the directory, .knotless, or a file) is reported
("is a symbolic link: workflows must be regular files"), never followed,
and so is a file named *.YML or *.Yaml (the server would never run it), and
a file name with a control or format character (the workflow's default
name comes from it); such names are shown escaped. Every other entry of
.knotless/workflows (x.yaml.bak, c.json, a directory) is listed with why it
is not a workflow ("not a workflow, will not run: ..."); a FILE named
explicitly that the server would never run as a workflow is a problem.

Exits 1 when any file has a problem, else prints "N workflows OK" and
exits 0. Needs no server.`,
		Example: `  knotless workflow lint
  knotless workflow lint .knotless/workflows/ci.yml other.yml
  knotless workflow lint --expand
  knotless workflow lint --json`,
		RunE: s.runE(o),
	}
	lint.Flags().BoolVar(&o.Expand, "expand", false, "also print the runs each file makes (matrix runs, needs, retry)")
	cmd.AddCommand(lint)
	return cmd
}

// workflowLintOptions is `knotless workflow lint [FILES...]`. It needs no
// server: run reads the files (relative to the App's Dir) and prints.
type workflowLintOptions struct {
	Expand bool     // --expand
	files  []string // FILES; none: the checkout's workflows
}

func (o *workflowLintOptions) complete(_ context.Context, _ *session, args []string) error {
	o.files = args
	return nil
}

func (o *workflowLintOptions) validate() error { return nil }

func (o *workflowLintOptions) run(_ context.Context, s *session) error {
	return s.lint(o.files, o.Expand)
}

// lint checks files, or without files the workflow files of the checkout
// (findWorkflows), and prints the problems (printLint).
func (s *session) lint(files []string, expand bool) error {
	base := s.app.Dir
	var ignored []LintIgnored
	if len(files) == 0 {
		found, err := findWorkflows(base)
		if err != nil {
			return err
		}
		if len(found.problems) > 0 {
			return s.printLint(LintOutput{Files: []string{}, Problems: found.problems, Ignored: []LintIgnored{}}, 1, 0)
		}
		files, base, ignored = found.files, found.base, found.ignored
		if len(files) == 0 {
			s.printIgnored(ignored)
			if len(ignored) > 0 {
				return failf("no workflows found in %s (*.yml, *.yaml): the entries above are not workflows and will not run; rename or move them", found.dir)
			}
			return failf("no workflows found in %s (*.yml, *.yaml): run inside a repository or name the FILES", found.dir)
		}
	}
	out := LintOutput{Files: make([]string, 0, len(files)), Problems: []LintProblem{}, Ignored: ignored}
	if out.Ignored == nil {
		out.Ignored = []LintIgnored{}
	}
	parsed := make([]workflow.PipelineFile, 0, len(files))
	byFile := map[string][]LintProblem{}
	for _, f := range files {
		out.Files = append(out.Files, workflow.DisplayPath(f))
		p := f
		if base != "" && !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		probs, runs := lintFile(f, p)
		byFile[f] = probs
		parsed = append(parsed, workflow.PipelineFile{Path: f, Runs: runs})
	}
	// needs: across the files, and the other workflows beside them.
	check := append(slices.Clone(parsed), siblings(files, base)...)
	needProblems, _ := workflow.CheckNeeds(check)
	bad := 0
	for i, f := range files {
		for _, e := range needProblems[f] {
			byFile[f] = append(byFile[f], LintProblem{File: orName(e.Path, f), Line: e.Line, Col: e.Col, Message: e.Msg})
		}
		if len(byFile[f]) > 0 {
			bad++
			parsed[i].Runs = nil
		}
		out.Problems = append(out.Problems, byFile[f]...)
	}
	if expand {
		out.Runs = expansion(parsed)
	}
	return s.printLint(out, bad, len(files))
}

// foundWorkflows is what findWorkflows found in a checkout.
type foundWorkflows struct {
	base     string        // the base directory given, as a real path ("" stays "")
	dir      string        // the workflows directory with a trailing separator, for messages
	files    []string      // the workflow files, as seen from where lint started, sorted
	ignored  []LintIgnored // entries that are not workflows, and misplaced directories
	problems []LintProblem // .knotless or its workflows directory is not a real directory
}

// findWorkflows lists the workflow files of the git work tree holding base
// (the process's directory when base is ""), by the server's rules
// (workflow.CheckDir, CheckFile, MisplacedDir): a symbolic link is reported,
// never followed, and every other entry is listed with why it is not a
// workflow. With problems, the rest is not looked at.
func findWorkflows(base string) (foundWorkflows, error) {
	var found foundWorkflows
	cwd := base
	if cwd == "" {
		var err error
		if cwd, err = os.Getwd(); err != nil {
			return found, fmt.Errorf("find workflows: %w", err)
		}
	}
	// git names the top by its real path: compare real paths.
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
		if base != "" {
			base = real
		}
	}
	found.base = base
	root := checkoutRoot(cwd)
	found.dir = filepath.Join(root, workflow.Dir) + string(filepath.Separator)
	rel := func(f string) string { // named as seen from where lint was started
		if r, err := filepath.Rel(cwd, f); err == nil {
			return r
		}
		return f
	}
	for _, d := range []string{filepath.Dir(workflow.Dir), workflow.Dir} {
		fi, err := os.Lstat(filepath.Join(root, d))
		if err != nil {
			break // reported by the caller as no workflows found
		}
		if err := workflow.CheckDir(filepath.ToSlash(d), lstatKind(fi)); err != nil {
			found.problems = problemOf(rel(filepath.Join(root, d)), err)
			return found, nil
		}
	}
	// A directory of .knotless named almost like the workflows'
	// (.knotless/workflow) is never looked at: said, as the server
	// says it at a push.
	if des, err := os.ReadDir(filepath.Join(root, filepath.Dir(workflow.Dir))); err == nil {
		for _, d := range des {
			p := filepath.ToSlash(filepath.Join(filepath.Dir(workflow.Dir), d.Name()))
			if why := workflow.MisplacedDir(p); d.IsDir() && why != "" {
				found.ignored = append(found.ignored, LintIgnored{File: workflow.DisplayPath(rel(filepath.Join(root, p))), Reason: why})
			}
		}
	}
	dir := filepath.Join(root, workflow.Dir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return found, fmt.Errorf("find workflows: %w", err)
	}
	for _, e := range entries {
		name := filepath.Join(dir, e.Name())
		kind := entryKind(e.Type())
		if ok, _ := workflow.CheckFile(filepath.ToSlash(filepath.Join(workflow.Dir, e.Name())), kind); ok {
			found.files = append(found.files, rel(name))
			continue
		}
		found.ignored = append(found.ignored, LintIgnored{File: workflow.DisplayPath(rel(name)),
			Reason: workflow.NotWorkflow(e.Name(), kind)})
	}
	sort.Strings(found.files)
	return found, nil
}

// siblings parses the workflow files in the directories of files that are
// not among them, for resolving needs: (their own problems are not
// reported).
func siblings(files []string, base string) []workflow.PipelineFile {
	named := map[string]bool{}
	dirs := map[string]bool{}
	for _, f := range files {
		named[filepath.Clean(f)] = true
		dirs[filepath.Dir(f)] = true
	}
	var out []workflow.PipelineFile
	for d := range dirs {
		read := d
		if base != "" && !filepath.IsAbs(read) {
			read = filepath.Join(base, read)
		}
		entries, _ := os.ReadDir(read)
		for _, e := range entries {
			f := filepath.Join(d, e.Name())
			if ok, err := workflow.CheckFile(filepath.ToSlash(filepath.Join(workflow.Dir, e.Name())), entryKind(e.Type())); named[filepath.Clean(f)] || !ok || err != nil {
				continue
			}
			src, err := os.ReadFile(filepath.Join(read, e.Name()))
			if err != nil {
				continue
			}
			runs, _ := workflow.Expand(f, src)
			out = append(out, workflow.PipelineFile{Path: f, Runs: runs})
		}
	}
	slices.SortFunc(out, func(a, b workflow.PipelineFile) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// expansion lists the runs of the files without problems.
func expansion(files []workflow.PipelineFile) []LintRun {
	var out []LintRun
	for _, f := range files {
		for _, r := range f.Runs {
			lr := LintRun{File: workflow.DisplayPath(f.Path), Name: r.Name, Retry: r.Retry.String()}
			for _, v := range r.Combo {
				lr.Matrix = append(lr.Matrix, api.MatrixValue{Name: v.Name, Value: v.Value})
			}
			for _, n := range r.Needs {
				lr.Needs = append(lr.Needs, n.Name)
			}
			out = append(out, lr)
		}
	}
	return out
}

// printExpansion prints the runs lint --expand found, file by file.
func printExpansion(w io.Writer, runs []LintRun) {
	for i := 0; i < len(runs); {
		j := i
		for j < len(runs) && runs[j].File == runs[i].File {
			j++
		}
		r := runs[i]
		fmt.Fprintf(w, "%s: %d %s", r.File, j-i, plural(j-i, "run", "runs"))
		if len(r.Needs) > 0 {
			fmt.Fprintf(w, ", needs %s", strings.Join(r.Needs, ", "))
		}
		if r.Retry != "never" {
			fmt.Fprintf(w, ", retried %s", r.Retry)
		}
		fmt.Fprintln(w)
		for _, x := range runs[i:j] {
			vals := make([]string, len(x.Matrix))
			for k, v := range x.Matrix {
				vals[k] = v.Name + "=" + v.Value
			}
			if len(vals) > 0 {
				fmt.Fprintf(w, "  %s    [%s]\n", x.Name, strings.Join(vals, ", "))
			} else {
				fmt.Fprintf(w, "  %s\n", x.Name)
			}
		}
		i = j
	}
}

// printLint prints the problems (or "N workflows OK") and fails when bad
// files had problems.
func (s *session) printLint(out LintOutput, bad, files int) error {
	if s.jsonOut {
		if err := writeJSON(s.stdout(), out); err != nil {
			return err
		}
	} else {
		for _, pr := range out.Problems {
			if pr.Line > 0 {
				fmt.Fprintf(s.stdout(), "%s:%d:%d: %s\n", pr.File, pr.Line, pr.Col, pr.Message)
			} else {
				fmt.Fprintf(s.stdout(), "%s: %s\n", pr.File, pr.Message)
			}
		}
		s.printIgnored(out.Ignored)
	}
	if bad > 0 {
		return failf("%d problem(s) in %d of %d workflow(s)", len(out.Problems), bad, max(files, bad))
	}
	if !s.jsonOut {
		printExpansion(s.stdout(), out.Runs)
		fmt.Fprintf(s.stdout(), "%d %s OK\n", files, plural(files, "workflow", "workflows"))
	}
	return nil
}

// printIgnored prints the entries of .knotless/workflows that will not run
// (not with --json: LintOutput.Ignored has them).
func (s *session) printIgnored(ignored []LintIgnored) {
	if s.jsonOut {
		return
	}
	for _, ig := range ignored {
		fmt.Fprintf(s.stdout(), "%s: not a workflow, will not run: %s\n", ig.File, ig.Reason)
	}
}

// lstatKind is the workflow.EntryKind of what os.Lstat found.
func lstatKind(fi os.FileInfo) workflow.EntryKind { return entryKind(fi.Mode()) }

// entryKind is the workflow.EntryKind of a file mode (its type bits).
func entryKind(m os.FileMode) workflow.EntryKind {
	switch {
	case m.IsRegular():
		return workflow.KindRegular
	case m.IsDir():
		return workflow.KindDir
	case m&os.ModeSymlink != 0:
		return workflow.KindSymlink
	}
	return workflow.KindOther
}

// problemOf turns a workflow error into lint problems named name.
func problemOf(name string, err error) []LintProblem {
	var one *workflow.Error
	if errors.As(err, &one) {
		return []LintProblem{{File: workflow.DisplayPath(name), Line: one.Line, Col: one.Col, Message: one.Msg}}
	}
	return []LintProblem{{File: workflow.DisplayPath(name), Message: err.Error()}}
}

// lintFile parses one file; name is what messages call it, path where it
// is read from. It returns its problems, or the runs it makes.
func lintFile(name, path string) ([]LintProblem, []*workflow.Workflow) {
	// The server's rule for what a workflow file is: a regular file; a
	// symbolic link is reported, not followed.
	if fi, err := os.Lstat(path); err == nil {
		ok, err := workflow.CheckFile(name, lstatKind(fi))
		if err != nil {
			return problemOf(name, err), nil
		}
		if !ok {
			return []LintProblem{{File: workflow.DisplayPath(name), Message: "will not run: " + workflow.NotWorkflow(name, lstatKind(fi))}}, nil
		}
	}
	// A file of .knotless/workflow (a typo) checks as a workflow, and
	// never runs.
	if abs, err := filepath.Abs(path); err == nil {
		dir := filepath.Dir(abs)
		if filepath.Base(filepath.Dir(dir)) == filepath.Dir(workflow.Dir) {
			if why := workflow.MisplacedDir(filepath.Dir(workflow.Dir) + "/" + filepath.Base(dir)); why != "" {
				return []LintProblem{{File: workflow.DisplayPath(name), Message: "will not run: it is in " + workflow.DisplayPath(filepath.Dir(workflow.Dir)+"/"+filepath.Base(dir)) + ", " + why}}, nil
			}
		}
	}
	src, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *os.PathError
		if errors.As(err, &pe) {
			msg = "cannot read: " + pe.Err.Error()
		}
		return []LintProblem{{File: workflow.DisplayPath(name), Message: msg}}, nil
	}
	runs, err := workflow.Expand(name, src)
	if err == nil {
		return nil, runs
	}
	var list workflow.ErrorList
	var one *workflow.Error
	switch {
	case errors.As(err, &list):
		probs := make([]LintProblem, 0, len(list))
		for _, e := range list {
			probs = append(probs, LintProblem{File: orName(e.Path, name), Line: e.Line, Col: e.Col, Message: e.Msg})
		}
		return probs, nil
	case errors.As(err, &one):
		return []LintProblem{{File: orName(one.Path, name), Line: one.Line, Col: one.Col, Message: one.Msg}}, nil
	}
	return []LintProblem{{File: workflow.DisplayPath(name), Message: err.Error()}}, nil
}

func orName(p, name string) string {
	if p == "" {
		return workflow.DisplayPath(name)
	}
	return p
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// checkoutRoot is the top of the git work tree holding dir, or dir itself
// when it is in none (or git is missing), as `knotless-run exec` finds it.
func checkoutRoot(dir string) string {
	cmd := exec.Command("git", "rev-parse", "--show-toplevel")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err == nil {
		if top := strings.TrimSpace(string(out)); top != "" {
			return top
		}
	}
	return dir
}
