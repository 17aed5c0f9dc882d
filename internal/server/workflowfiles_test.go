package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

const manualWorkflow = "on:\n  manual: {}\n  push: {}\nsteps:\n  - run: echo m\n"

// symlinkTree is a work tree whose workflow is reached through a symbolic
// link made by link (in the work tree dir), committed.
func symlinkTree(t *testing.T, link func(dir string)) string {
	t.Helper()
	dir := servertest.WorkTree(t, map[string]string{"ci/manual.yml": manualWorkflow})
	link(dir)
	servertest.Commit(t, dir, nil, "link")
	return dir
}

func symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

// A workflows directory that is a symbolic link made lint say "1 workflow
// OK" while a push made no run and a trigger said no workflow had a manual
// trigger: now both push and trigger make an errored run saying why.
func TestPush_SymlinkedWorkflowsDirIsReportedNotIgnored(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, link, path string }{
		{"workflows", ".knotless/workflows", ".knotless/workflows"},
		{"knotless", ".knotless", ".knotless"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, servertest.Options{})
			dir := symlinkTree(t, func(dir string) {
				target := "../ci"
				if c.link == ".knotless" {
					if err := os.MkdirAll(filepath.Join(dir, "kn", "workflows"), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, "kn", "workflows", "manual.yml"), []byte(manualWorkflow), 0o644); err != nil {
						t.Fatal(err)
					}
					target = "kn"
				}
				symlink(t, target, filepath.Join(dir, filepath.FromSlash(c.link)))
			})
			f.push(t, dir, "main")
			runs := f.runs(t)
			if len(runs) != 1 || runs[0].State != api.StateErrored || runs[0].WorkflowPath != c.path ||
				!strings.Contains(runs[0].Message, "is a symbolic link") {
				t.Fatalf("runs after the push = %+v; want one errored run of %s saying it is a symbolic link", runs, c.path)
			}
			if log := f.runLog(t, runs[0].ID, api.SetupStep); !strings.HasPrefix(log, c.path+":1:1: is a symbolic link: workflows must be regular files") {
				t.Errorf("setup log %q", log)
			}
			var p api.Pipeline
			if err := f.alice().Procedure(context.Background(), api.MethodTriggerRun, api.TriggerInput{Repo: f.repo}, &p); err != nil {
				t.Fatalf("trigger: %v", err)
			}
			if len(p.Runs) != 1 || p.Runs[0].State != api.StateErrored || !strings.Contains(p.Runs[0].Message, "is a symbolic link") {
				t.Fatalf("trigger's pipeline = %+v; want one errored run saying it is a symbolic link", p)
			}
		})
	}
}

// A workflow file that is a symbolic link was read as its target's path
// and failed with "must be a mapping".
func TestPush_SymlinkedWorkflowFileIsReportedAsSymlinkNotMapping(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := symlinkTree(t, func(dir string) {
		symlink(t, "../../ci/manual.yml", filepath.Join(dir, ".knotless", "workflows", "linked.yml"))
	})
	f.push(t, dir, "main")
	runs := f.runs(t)
	if len(runs) != 1 || runs[0].State != api.StateErrored || runs[0].WorkflowPath != ".knotless/workflows/linked.yml" {
		t.Fatalf("runs = %+v; want one errored run of linked.yml", runs)
	}
	log := f.runLog(t, runs[0].ID, api.SetupStep)
	if !strings.Contains(log, ".knotless/workflows/linked.yml:1:1: is a symbolic link: workflows must be regular files") || strings.Contains(log, "mapping") {
		t.Errorf("setup log %q; want it to say the file is a symbolic link", log)
	}
}

// A workflow file named with an escape sequence took its name from it, so
// run list, show and logs drove the terminal; an explicit name: with the
// same bytes is refused. Now the file is refused too, and the errored
// run's name, path and log show the bytes escaped.
func TestPush_WorkflowFileNamedWithEscapeSequenceIsRefusedAndShownEscaped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	name := "esc\x1b]0;TITLE\a\x1b[31mred"
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/" + name + ".yml": "steps:\n  - run: echo hi\n"})
	f.push(t, dir, "main")
	runs := f.runs(t)
	if len(runs) != 1 {
		t.Fatalf("runs = %+v, want one", runs)
	}
	r := runs[0]
	const shown = `esc\x1b]0;TITLE\x07\x1b[31mred`
	if r.State != api.StateErrored || r.Workflow != shown || r.WorkflowPath != ".knotless/workflows/"+shown+".yml" {
		t.Fatalf("run = %+v; want errored, named %q", r, shown)
	}
	log := f.runLog(t, r.ID, api.SetupStep)
	for _, s := range []string{r.Message, log} {
		if strings.ContainsAny(s, "\x1b\a") || !strings.Contains(s, "control character") {
			t.Errorf("message or log %q: want the file name escaped and refused", s)
		}
	}
}

// run trigger --ref main~5 was recorded as the ref refs/heads/main~5 (and
// given to the run as KNOTLESS_REF): a ref is a branch or tag by name,
// never a revision expression; a commit is given with SHA.
func TestTrigger_RefRevisionExpressionIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/manual.yml": manualWorkflow})
	first := servertest.Git(t, dir, "rev-parse", "HEAD")
	head := servertest.Commit(t, dir, map[string]string{"README": "2\n"}, "second")
	servertest.Git(t, dir, "tag", "v1")
	f.push(t, dir, "main", "refs/tags/v1")
	ctx := context.Background()
	for _, ref := range []string{"main~1", "main^{commit}", "main^", "HEAD", "HEAD@{1}", "main@{0}", "main..main", "refs/heads/main~1",
		"refs/knotless/pipelines/1", "refs/heads/../tags/v1", "-main", first, "ma in", "main:x", "main\x1b[31m"} {
		var p api.Pipeline
		err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo, Ref: ref}, &p)
		if err == nil {
			t.Errorf("--ref %q made pipeline %d at %s %s; want it refused", ref, p.ID, p.Ref, p.SHA)
		} else if ref != "HEAD" && ref != first && !api.IsError(err, api.ErrInvalidRequest) {
			t.Errorf("--ref %q: %v, want InvalidRequest", ref, err)
		}
	}
	for _, ref := range []string{"main", "refs/heads/main", "v1", "refs/tags/v1"} {
		var p api.Pipeline
		if err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo, Ref: ref}, &p); err != nil || p.SHA != head {
			t.Errorf("--ref %q: pipeline %+v, %v; want one at %s", ref, p, err, head)
		}
	}
	// An older commit of main, by its full id: the ref stays main.
	var p api.Pipeline
	if err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo, Ref: "main", SHA: first}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Ref != "refs/heads/main" || p.SHA != first || len(p.Runs) != 1 || p.Runs[0].SHA != first {
		t.Errorf("--sha %s: pipeline %+v; want refs/heads/main at it", first, p)
	}
	// Abbreviated, an expression, or a commit no branch or tag has.
	orphan := servertest.Commit(t, dir, map[string]string{"README": "3\n"}, "unpushed")
	for _, c := range []struct {
		sha  string
		want string
	}{{first[:12], api.ErrInvalidRequest}, {"main~1", api.ErrInvalidRequest}, {strings.ToUpper(first), api.ErrInvalidRequest},
		{orphan, api.ErrNotFound}, {strings.Repeat("0", 40), api.ErrNotFound}} {
		if err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo, Ref: "main", SHA: c.sha}, nil); !api.IsError(err, c.want) {
			t.Errorf("--sha %q: %v, want %s", c.sha, err, c.want)
		}
	}
}
