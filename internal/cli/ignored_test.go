package cli

import (
	"strings"
	"testing"

	"knotless.dev/knotless/internal/server/servertest"
)

// A push whose workflow files are all ignored says so where the pusher
// looks (issue 39 §1; before, the notes went to the server's log only and
// the user saw nothing at all): git push's "remote:" lines name each
// ignored entry and why, a pipeline with no runs holds them as notes, and
// run list prints them. A directory typed .knotless/workflow/ is one of
// them. A push that runs something says its pipeline, and one with no
// workflow at all says that.
func TestPush_IgnoredWorkflowFilesAreSaidWhereThePusherLooks(t *testing.T) {
	srv, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	notes := []string{
		".knotless/workflow: not run: a directory that is never looked at: workflows are the files directly in .knotless/workflows/ (lower case, with an s); move them there to run them",
		".knotless/workflows/ci.json: not a workflow, not run: the file name ends in .json",
		".knotless/workflows/ci: not a workflow, not run: a directory: workflows are the files directly in .knotless/workflows, none below it",
	}
	dir := servertest.WorkTree(t, map[string]string{
		".knotless/workflow/build.yml":   workflowTwoSteps,
		".knotless/workflows/ci.json":    `{"steps": [{"run": "echo"}]}`,
		".knotless/workflows/ci/x.yml":   workflowTwoSteps,
		".knotless/shared/steps/x/a.yml": "x",
	})
	sha := servertest.Git(t, dir, "rev-parse", "--short=7", "HEAD")
	out := srv.PushDirOutput(t, dir, "admin/app", srv.AdminToken, "HEAD:refs/heads/main")
	want := []string{"remote: Knotless: main at " + sha + ": pipeline 1 runs nothing, because:"}
	for _, n := range notes {
		want = append(want, "remote: Knotless:   "+n)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("git push does not say %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "shared") {
		t.Errorf("a directory of .knotless of another name was named:\n%s", out)
	}

	// lint says the same of the work tree before any push.
	if r := runCLI(t, e, dir, nil, "workflow", "lint"); r.code == ExitOK || !strings.Contains(r.stdout+r.stderr, ".knotless/workflow: not a workflow, will not run: a directory that is never looked at") {
		t.Errorf("workflow lint does not name .knotless/workflow: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, e, dir, nil, "workflow", "lint"); strings.Contains(r.stderr, "run inside a repository") {
		t.Errorf("workflow lint, run inside the repository, tells to run inside one:\n%s", r.stderr)
	}
	if r := runCLI(t, e, dir, nil, "workflow", "lint", ".knotless/workflow/build.yml"); r.code == ExitOK || !strings.Contains(r.stdout+r.stderr, "will not run: it is in .knotless/workflow, a directory that is never looked at") {
		t.Errorf("workflow lint of a file in .knotless/workflow: exit %d, want it refused\n%s%s", r.code, r.stdout, r.stderr)
	}

	r := mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app")
	if !strings.Contains(r.stdout, "Pipeline 1 (push of main at "+sha+") ran nothing:\n") || !strings.Contains(r.stdout, "No runs in admin/app.") {
		t.Errorf("run list does not say that pipeline 1 ran nothing:\n%s", r.stdout)
	}
	for _, n := range notes {
		if !strings.Contains(r.stdout, "  "+n) {
			t.Errorf("run list lacks %q:\n%s", n, r.stdout)
		}
	}

	servertest.Commit(t, dir, map[string]string{".knotless/workflows/ci.yml": workflowTwoSteps}, "a workflow")
	sha = servertest.Git(t, dir, "rev-parse", "--short=7", "HEAD")
	out = srv.PushDirOutput(t, dir, "admin/app", srv.AdminToken, "HEAD:refs/heads/main")
	if w := "remote: Knotless: main at " + sha + ": pipeline 2, 1 run (ci): knotless run list --pipeline 2"; !strings.Contains(out, w) {
		t.Errorf("git push does not say %q:\n%s", w, out)
	}

	// Pipeline 1 stays in the list under the later runs, and by its id.
	r = mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app")
	if !strings.Contains(r.stdout, "Pipeline 1 (push of main at ") || !strings.Contains(r.stdout, notes[1]) {
		t.Errorf("run list no longer says that pipeline 1 ran nothing once pipeline 2 ran:\n%s", r.stdout)
	}
	r = mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app", "--pipeline", "1")
	if !strings.Contains(r.stdout, "Pipeline 1 (push of main at ") || !strings.Contains(r.stdout, notes[0]) || strings.Contains(r.stdout, "No runs") {
		t.Errorf("run list --pipeline 1 does not say why it ran nothing:\n%s", r.stdout)
	}
	servertest.Git(t, dir, "rm", "-q", ".knotless/workflows/ci.yml")
	servertest.Commit(t, dir, map[string]string{".knotless/workflows/other.json": "{}"}, "json only")
	srv.PushDirOutput(t, dir, "admin/app", srv.AdminToken, "HEAD:refs/heads/main")
	r = mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app", "--pipeline", "latest")
	if !strings.Contains(r.stdout, "Pipeline 3 (push of main at ") || !strings.Contains(r.stdout, "other.json: not a workflow") {
		t.Errorf("run list --pipeline latest does not show pipeline 3, which ran nothing:\n%s", r.stdout)
	}

	bare := servertest.WorkTree(t, map[string]string{"README": "x"})
	sha = servertest.Git(t, bare, "rev-parse", "--short=7", "HEAD")
	out = srv.PushDirOutput(t, bare, "admin/app", srv.AdminToken, "HEAD:refs/heads/docs")
	if w := "remote: Knotless: docs at " + sha + ": no workflow in .knotless/workflows/, nothing runs"; !strings.Contains(out, w) {
		t.Errorf("git push does not say %q:\n%s", w, out)
	}
}
